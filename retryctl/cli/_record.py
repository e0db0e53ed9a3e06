"""``retryctl record`` and ``retryctl sweep``: sample banks recorded from a model, and the sampling
knobs swept over them (docs/stopping.md, "Recording a bank")."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NoReturn

import typer
from rich import box
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn
from rich.table import Table

from retryctl._paths import PathError, check_input, check_output
from retryctl.cli._interrupt import again_command, interrupted
from retryctl.cli._model_check import require_embedded_build, require_extra
from retryctl.cli._quiet_stdout import run_quietly
from retryctl.cli._ray_option import RayOption, ray_executor
from retryctl.cli._stage_option import (
    ChatTemplateOption,
    StageModeOption,
    StageOption,
    parse_stages,
    stage_error,
    stage_mode_problem,
    stage_renderer,
)
from retryctl.exceptions import ConfigError, TaskFormatError

if TYPE_CHECKING:
    from retryctl.batch import Task
    from retryctl.models import ModelBackend, Stage
    from retryctl.record import RecordPlan

__all__ = ["record", "sweep"]

_USAGE_EXIT = 2
_DRAW_TEMPERATURE = 0.7
"""``record``'s default temperature: a sweep of one stage draws the held stages' unset knobs at it."""


def _fail(message: str) -> NoReturn:
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(_USAGE_EXIT)


def _tasks(path: Path) -> list[Task]:
    from retryctl.batch import load_tasks

    try:
        check_input(path, what="task file")
        return load_tasks(path)
    except (PathError, TaskFormatError) as exc:
        _fail(str(exc))


def _backend(
    base_url: str | None,
    model_name: str | None,
    command: str,
    *,
    staged: bool = False,
    stage_mode: str | None = None,
    template: Path | None = None,
) -> ModelBackend:
    """The model, or a one-line error before any file is written."""
    from retryctl.agent._graph import demo_model

    problem = stage_mode_problem(staged=staged, base_url=base_url, mode=stage_mode, template=template)
    if problem is not None:
        _fail(problem)
    if base_url is not None:
        require_extra("openai", f"retryctl {command} --base-url")
    try:
        model = demo_model(base_url, model_name)
    except ConfigError as exc:
        _fail(str(exc))
    if base_url is None:
        require_embedded_build(f"retryctl {command}")
    elif stage_mode is not None:
        from retryctl.models._openai_stages import set_stage_mode

        if template is not None:
            require_embedded_build(f"retryctl {command} --chat-template-gguf")
        set_stage_mode(model, stage_mode, stage_renderer(stage_mode, template))  # type: ignore[arg-type]
    return model


def _check_resume(out: Path, plan: RecordPlan) -> set[str]:
    """The ids of the tasks ``out`` already holds; a bank drawn with other knobs is refused, not mixed in."""
    from retryctl.batch._files import BANK_LINES, read_results
    from retryctl.record._record import sampling_of

    try:
        lines = read_results(out, kind=BANK_LINES).results
    except TaskFormatError as exc:
        _fail(f"--out: {exc}")
    wanted = sampling_of(plan)
    for line in lines:
        had = line.get("sampling")
        if had != wanted:
            had = had if isinstance(had, dict) else {}
            # A key only one side has (``stages``, which unstaged banks lack) differs too.
            differ = [key for key in {**had, **wanted} if had.get(key) != wanted.get(key)]
            then = ", ".join(f"{key}={json.dumps(had.get(key))}" for key in differ)
            now = ", ".join(f"{key}={json.dumps(wanted.get(key))}" for key in differ)
            _fail(
                f"--out {out}: task {line['id']!r} was recorded with {then}; this run asks {now}: "
                "record into another file"
            )
        if len(line["samples"]) != plan.samples:
            _fail(f"--out {out}: task {line['id']!r} has {len(line['samples'])} samples, not {plan.samples}")
    return {str(line["id"]) for line in lines}


def _record_with_progress(
    tasks: list[Task],
    backend: ModelBackend,
    out: Path,
    plan: RecordPlan,
    *,
    label: str,
    done: set[str],
    remote: dict[str, Any] | None = None,
) -> int:
    """Record the tasks whose ids are not in ``done`` (what :func:`_check_resume` read), with a bar."""
    from retryctl.record import record_bank

    todo = [t for t in tasks if t.id not in done]
    console = Console(stderr=True)
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn())
    with Progress(*columns, console=console, transient=not console.is_terminal) as progress:
        bar = progress.add_task(label, total=len(tasks), completed=len(tasks) - len(todo))
        # Stdout is the closing line alone: Ray's driver would print to it from its thread (_quiet_stdout).
        written = run_quietly(
            record_bank(
                todo,
                backend,
                os.fspath(out),
                plan,
                recorded=done,
                on_done=lambda *_: progress.advance(bar),
                **(remote or {}),
            ),
            quiet=remote is not None,
        )
    return written


def _plan(
    *,
    samples: int,
    temperature: float,
    top_p: float | None,
    min_p: float | None,
    seed: int,
    max_tokens: int,
    system: str | None,
    extract: str,
    concurrency: int,
    stages: tuple[Stage, ...] = (),
) -> RecordPlan:
    from retryctl.models import SamplingParams
    from retryctl.record import EXTRACTIONS, RecordPlan

    if extract not in EXTRACTIONS:
        _fail(f"--extract {extract!r}: must be one of {', '.join(EXTRACTIONS)}")
    try:
        params = SamplingParams(
            temperature=temperature,
            top_p=top_p,
            min_p=min_p,
            seed=seed,
            max_tokens=max_tokens,
            stages=stages,
        )
    except ConfigError as exc:
        _fail(f"--{exc.field.replace('_', '-')}: {exc}")
    return RecordPlan(
        samples=samples,
        params=params,
        system=system,
        extraction=extract,  # type: ignore[arg-type]  # checked against EXTRACTIONS above
        concurrency=concurrency,
    )


_Samples = Annotated[int, typer.Option("--samples", min=1, help="Samples per task (the bank's K).")]
_Seed = Annotated[
    int, typer.Option("--seed", help="Seed of each task's first sample; sample i uses seed + i.")
]
_MaxTokens = Annotated[int, typer.Option("--max-tokens", min=1, help="Most tokens per sample.")]
_System = Annotated[str | None, typer.Option("--system", help="A system message before each question.")]
_Extract = Annotated[
    str,
    typer.Option(
        "--extract", help="How answers are read: 'default' (boxed, 'the answer is', last line) or 'number'."
    ),
]
_Concurrency = Annotated[int, typer.Option("--concurrency", min=1, help="Tasks drawn at once.")]
_BaseUrl = Annotated[
    str | None, typer.Option("--base-url", help="OpenAI-compatible server (default: embedded).")
]
_ModelName = Annotated[str | None, typer.Option("--model-name", help="Model on that server.")]


def _stages(specs: list[str] | None, max_tokens: int) -> tuple[Stage, ...]:
    try:
        return parse_stages(specs, max_tokens=max_tokens)
    except ConfigError as exc:
        _fail(stage_error(exc))


def _recorded(out: Path) -> int:
    """Tasks the bank ``out`` holds (0 when there is none yet)."""
    from retryctl.batch._files import BANK_LINES, read_results

    return len(read_results(out, kind=BANK_LINES).results) if out.exists() else 0


def record(
    ctx: typer.Context,
    tasks_path: Annotated[
        Path, typer.Argument(metavar="TASKS.jsonl", help="Tasks: {id, question, gold?, stratum?} a line.")
    ],
    *,
    out: Annotated[Path, typer.Option("--out", help="The bank to write (a rerun adds the tasks it lacks).")],
    samples: _Samples = 20,
    temperature: Annotated[float, typer.Option("--temperature", help="Sampling temperature.")] = 0.7,
    top_p: Annotated[
        float | None, typer.Option("--top-p", help="Nucleus mass (default: the backend's).")
    ] = None,
    min_p: Annotated[
        float | None, typer.Option("--min-p", help="Min-p filter (default: the backend's).")
    ] = None,
    seed: _Seed = 0,
    max_tokens: _MaxTokens = 256,
    system: _System = None,
    extract: _Extract = "default",
    concurrency: _Concurrency = 1,
    stage: StageOption = None,
    stage_mode: StageModeOption = None,
    chat_template_gguf: ChatTemplateOption = None,
    base_url: _BaseUrl = None,
    model_name: _ModelName = None,
    ray: RayOption = None,
) -> None:
    """Record a sample bank: K samples per task with token logprobs, counts, finish reasons, latency;
    with ``--stage``, each sample in stages, one request each, and per-stage counts."""
    tasks = _tasks(tasks_path)
    try:
        check_output(out, what="--out bank", inputs=[(tasks_path, "task file")])
    except PathError as exc:
        _fail(str(exc))
    plan = _plan(
        samples=samples,
        temperature=temperature,
        top_p=top_p,
        min_p=min_p,
        seed=seed,
        max_tokens=max_tokens,
        system=system,
        extract=extract,
        concurrency=concurrency,
        stages=_stages(stage, max_tokens),
    )
    done = _check_resume(out, plan)
    had = len(done)
    backend = _backend(
        base_url,
        model_name,
        "record",
        staged=bool(plan.stages),
        stage_mode=stage_mode,
        template=chat_template_gguf,
    )
    executor = ray_executor(ray, per_worker=concurrency, command="retryctl record")
    # Under --ray the workers build the model from where it is.
    remote = (
        {
            "executor": executor,
            "base_url": base_url,
            "model_name": model_name,
            "stage_mode": stage_mode,
            "chat_template": None if chat_template_gguf is None else os.fspath(chat_template_gguf),
        }
        if executor
        else None
    )
    label = f"recording {out.name}"
    try:
        written = _record_with_progress(tasks, backend, out, plan, label=label, done=done, remote=remote)
    except KeyboardInterrupt:
        interrupted(
            f"{_recorded(out)} of {len(tasks)} tasks recorded and kept in {os.fspath(out)}",
            again_command(ctx),
        )
    typer.echo(f"{os.fspath(out)}: {had + written} tasks ({written} recorded now, {had} already there)")


def _floats(text: str, name: str, *, optional: bool) -> list[float | None]:
    """A comma list of numbers; ``-`` (when ``optional``) means the backend's default."""
    out: list[float | None] = []
    for raw in text.split(","):
        part = raw.strip()
        if optional and part == "-":
            out.append(None)
            continue
        try:
            out.append(float(part))
        except ValueError:
            _fail(f"{name} {text!r}: {part!r} is not a number")
    if not out:
        _fail(f"{name}: give at least one value")
    return out


def _sweep_table(rows: list[dict[str, Any]]) -> Table:
    # Shares (the accuracies and the rates) are fractions with three decimals, as in every command.
    from retryctl.record._sweep_page import SWEEP_COLUMNS, sweep_rows

    # At 80 columns ten one-line headings do not fit: rich wraps a heading at its spaces (the page's
    # names, kept), columns sit one space apart without rules, and a point wraps between its knobs. A
    # cell is one word, so a number is never cut.
    table = Table(
        title="retryctl sweep", box=box.SIMPLE_HEAD, show_edge=False, padding=(0, 0), pad_edge=False
    )
    cells = sweep_rows(rows)  # a staged point's row, then one per stage
    for i, (title, _, _) in enumerate(SWEEP_COLUMNS):
        if title == "point":
            table.add_column(title, overflow="fold")
            continue
        # as wide as its longest heading word or cell: the heading wraps at its spaces, no number is cut
        width = max([len(word) for word in title.split()] + [len(row[i]) for row in cells])
        table.add_column(title, justify="right", min_width=width, max_width=width)
    for row_cells in cells:
        table.add_row(*row_cells)
    return table


def sweep(
    ctx: typer.Context,
    tasks_path: Annotated[
        Path,
        typer.Argument(metavar="TASKS.jsonl", help="Graded tasks: {id, question, gold, stratum?} a line."),
    ],
    *,
    out: Annotated[
        Path, typer.Option("--out", help="Directory for one bank per grid point (a rerun continues).")
    ],
    temperature: Annotated[
        str | None,
        typer.Option(
            "--temperature", help="Temperatures, comma-separated (default 0.7, or the swept stage's own)."
        ),
    ] = None,
    top_p: Annotated[
        str, typer.Option("--top-p", help="Top-p values, comma-separated; '-' = default.")
    ] = "-",
    min_p: Annotated[
        str, typer.Option("--min-p", help="Min-p values, comma-separated; '-' = default.")
    ] = "-",
    samples: _Samples = 10,
    seed: _Seed = 0,
    max_tokens: _MaxTokens = 256,
    system: _System = None,
    extract: _Extract = "default",
    concurrency: _Concurrency = 1,
    stage: StageOption = None,
    sweep_stage: Annotated[
        str | None,
        typer.Option(
            "--sweep-stage",
            metavar="NAME",
            help="Sweep this --stage's temperature, top-p and min-p, the other stages held ('-' in "
            "--top-p/--min-p: the stage's own).",
        ),
    ] = None,
    stage_mode: StageModeOption = None,
    chat_template_gguf: ChatTemplateOption = None,
    base_url: _BaseUrl = None,
    model_name: _ModelName = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the figures as JSON.")] = False,
    html: Annotated[Path | None, typer.Option("--html", help="Write a page with the curves.")] = None,
) -> None:
    """Record a bank per grid point of temperature × top-p × min-p (of one stage's with --sweep-stage),
    then compare them."""
    from retryctl.record._sweep import grid, point_figures, render_sweep_html, sweep_conflict, swept_stages
    from retryctl.record._sweep_tokens import sweep_heat_maps

    tasks = _tasks(tasks_path)
    if out.exists() and not out.is_dir():
        _fail(f"--out {out}: not a directory")
    stages = _stages(stage, max_tokens)
    top_ps, min_ps = _floats(top_p, "--top-p", optional=True), _floats(min_p, "--min-p", optional=True)
    temperatures = [
        t for t in _floats(temperature or "0.7", "--temperature", optional=False) if t is not None
    ]
    given = {"top_p": top_ps, "min_p": min_ps} | ({"temperature": temperatures} if temperature else {})
    if sweep_stage is not None:
        held = next((s for s in stages if s.name == sweep_stage), None)
        if held is None:
            named = ", ".join(s.name for s in stages) or "none"
            _fail(f"--sweep-stage {sweep_stage!r}: no --stage of that name (stages: {named})")
        # '-' (or no --temperature) keeps the swept stage's own setting, which the point then names.
        top_ps = [held.top_p if v is None else v for v in top_ps]
        min_ps = [held.min_p if v is None else v for v in min_ps]
        if temperature is None and held.temperature is not None:
            temperatures = [held.temperature]
    conflict = sweep_conflict(stages, sweep_stage, given)
    if conflict is not None:
        _fail(conflict)
    points = grid(temperatures, top_ps, min_ps, stage=sweep_stage)
    plans = [
        _plan(
            samples=samples,
            # A swept stage takes the point's knobs; the draw's own stay the record defaults, for the
            # held stages that leave a knob to the draw.
            temperature=p.temperature if sweep_stage is None else _DRAW_TEMPERATURE,
            top_p=p.top_p if sweep_stage is None else None,
            min_p=p.min_p if sweep_stage is None else None,
            seed=seed,
            max_tokens=max_tokens,
            system=system,
            extract=extract,
            concurrency=concurrency,
            stages=swept_stages(stages, p),
        )
        for p in points
    ]
    # A missing extra or --stage-mode leaves no empty --out behind.
    backend = _backend(
        base_url,
        model_name,
        "sweep",
        staged=bool(stages),
        stage_mode=stage_mode,
        template=chat_template_gguf,
    )
    out.mkdir(parents=True, exist_ok=True)
    done = [_check_resume(out / point.file_name, plan) for point, plan in zip(points, plans, strict=True)]
    if html is not None:
        try:
            check_output(html, what="--html page", inputs=[(tasks_path, "task file")])
        except PathError as exc:
            _fail(str(exc))
    try:
        for point, plan, ids in zip(points, plans, done, strict=True):
            _record_with_progress(tasks, backend, out / point.file_name, plan, label=point.label, done=ids)
    except KeyboardInterrupt:
        kept = sum(_recorded(out / point.file_name) for point in points)
        interrupted(
            f"{kept} of {len(tasks) * len(points)} (task, grid point) pairs recorded and kept under "
            f"{os.fspath(out)}",
            again_command(ctx),
        )
    rows = [point_figures(p, out / p.file_name) for p in points]
    if html is not None:
        maps = sweep_heat_maps([(p.heading, out / p.file_name) for p in points])
        page = render_sweep_html(rows, title=f"retryctl sweep: {tasks_path.name}", heat_maps=maps)
        html.write_text(page, encoding="utf-8")
    if as_json:
        typer.echo(json.dumps(rows, indent=2))
        return
    Console().print(_sweep_table(rows))
