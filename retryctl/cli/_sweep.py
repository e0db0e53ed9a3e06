"""``retryctl sweep``: a bank recorded per grid point of the sampling knobs (one stage's with
``--sweep-stage``), then the banks compared (docs/stopping.md, "Recording a bank")."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich import box
from rich.console import Console
from rich.table import Table

from retryctl._paths import PathError, check_output
from retryctl.cli._interrupt import again_command, interrupted
from retryctl.cli._record import (
    _backend,
    _BaseUrl,
    _check_resume,
    _Concurrency,
    _Extract,
    _fail,
    _MaxTokens,
    _ModelName,
    _plan,
    _record_with_progress,
    _recorded,
    _Samples,
    _Seed,
    _stages,
    _System,
    _tasks,
)
from retryctl.cli._stage_option import ChatTemplateOption, StageModeOption, StageOption
from retryctl.exceptions import BankFormatError

if TYPE_CHECKING:
    from retryctl.record._sweep import GridPoint

__all__ = ["sweep"]

_DRAW_TEMPERATURE = 0.7
"""``record``'s default temperature: a sweep of one stage draws the held stages' unset knobs at it."""


_NONE = object()
"""No value repeated (``None`` is a value here: ``-``)."""


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
    # Two points of one setting would write one bank twice over (every task id twice).
    repeated = next((v for i, v in enumerate(out) if v in out[:i]), _NONE)
    if repeated is not _NONE:
        _fail(f"{name} {text!r}: {'-' if repeated is None else f'{repeated:g}'} is given twice")
    return out


def _figures(points: list[GridPoint], out: Path) -> list[dict[str, Any]]:
    """Each point's figures from its bank; a malformed bank exits 2 with one line naming it."""
    from retryctl.record._sweep import point_figures

    try:
        return [point_figures(p, out / p.file_name) for p in points]
    except BankFormatError as exc:  # a bank under --out written by hand, or by an older sweep
        _fail(f"--out: {exc}")


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
    from retryctl.record._sweep import grid, render_sweep_html, sweep_conflict, swept_stages
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
    rows = _figures(points, out)
    if html is not None:
        maps = sweep_heat_maps([(p.heading, out / p.file_name) for p in points])
        page = render_sweep_html(rows, title=f"retryctl sweep: {tasks_path.name}", heat_maps=maps)
        html.write_text(page, encoding="utf-8")
    if as_json:
        typer.echo(json.dumps(rows, indent=2))
        return
    Console().print(_sweep_table(rows))
