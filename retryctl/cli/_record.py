"""``retryctl record``: a sample bank recorded from a model (docs/stopping.md, "Recording a bank"); the
helpers ``retryctl sweep`` (:mod:`._sweep`) records each grid point's bank with."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NoReturn

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

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

__all__ = ["record"]

_USAGE_EXIT = 2


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
        try:
            render = stage_renderer(stage_mode, template)
        except ValueError as exc:  # llama.cpp cannot read it: not a GGUF, or a truncated one
            _fail(f"--chat-template-gguf {template}: not a model file llama.cpp can read ({exc})")
        set_stage_mode(model, stage_mode, render)  # type: ignore[arg-type]
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
