"""``retryctl calibrate``: fit a calibration on graded runs and say how much it helps on a part of
them it was not fitted on, per difficulty stratum and, with ``--shift``, fitted on some strata and
tested on the others (docs/evals.md). The figures are :mod:`retryctl.evals._transfer`'s.

A task id is one task across every file given: in two files (the same results given twice, or a run and
its copy) it counts once, by the line of the last file that has it, as a resumed result file's last line
for a task wins; a ``note:`` line says how many ids repeated. The split is by task id. A fit on fewer
than :data:`retryctl.evals._fit.MIN_FIT_POINTS` decision points is written with a
``warning:`` line on stderr (and in ``warnings`` of ``--json``) saying why it is not to be trusted."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any, NoReturn

import typer
from rich.console import Console
from rich.table import Table

from retryctl._paths import PathError, check_input, check_output
from retryctl._scores import cell
from retryctl.cli._console import table_console
from retryctl.exceptions import TaskFormatError

__all__ = ["calibrate"]

_USAGE_EXIT = 2


def _fail(message: str) -> NoReturn:
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(_USAGE_EXIT)


def calibrate(
    results: Annotated[
        list[Path],
        typer.Argument(
            metavar="RESULTS.jsonl", help="Graded result files (retryctl batch or eval, with gold)."
        ),
    ],
    *,
    out: Annotated[Path, typer.Option("--out", help="The calibration file to write.")],
    holdout: Annotated[
        float,
        typer.Option("--holdout", min=0.0, max=0.9, help="Share of tasks kept out of the fit, to test it."),
    ] = 0.3,
    seed: Annotated[int, typer.Option("--seed", help="Seed of the task split.")] = 0,
    shift: Annotated[
        bool,
        typer.Option(
            "--shift", help="Also fit on some strata and test on the others (leave one out, hard/easy)."
        ),
    ] = False,
    balance_strata: Annotated[
        bool,
        typer.Option(
            "--balance-strata/--pooled",
            help="Weigh each stratum equally in the fit (default), or every decision point alike.",
        ),
    ] = True,
    as_json: Annotated[bool, typer.Option("--json", help="Print the report as JSON.")] = False,
) -> None:
    """Fit a map from raw fused confidence to P(correct) on graded runs; ECE before and after, held out."""
    from retryctl.cli._model_check import require_extra

    require_extra("calibration", "retryctl calibrate")
    from retryctl.batch import read_results
    from retryctl.evals import Outcome, brier, ece, fit_calibration, save_calibration, split_of
    from retryctl.evals._fit import MIN_FIT_POINTS
    from retryctl.evals._transfer import by_stratum, transfer

    lines_of: dict[str, dict[str, Any]] = {}
    repeated: set[str] = set()
    for path in results:
        try:
            check_input(path, what="results file")
            lines = read_results(path).results
        except (PathError, TaskFormatError) as exc:
            _fail(str(exc))
        own = {str(r.get("id")): r for r in lines}  # a resumed file's last line for a task wins
        repeated.update(own.keys() & lines_of.keys())
        lines_of.update(own)  # and across files, the last file's
    if repeated:
        typer.echo(
            f"note: {len(repeated)} task ids are in more than one file (e.g. {min(repeated)!r}); each counts "
            "once, by its line in the last file that has it",
            err=True,
        )
    outcomes = [
        Outcome(
            raw=float(point["fused"]),
            correct=bool(point["correct"]),
            member=point.get("target"),
            # By the task's id alone: all its points on one side of the split.
            task=task,
            stratum=str(line.get("stratum") or ""),
        )
        for task, line in lines_of.items()
        for point in line.get("points") or []
    ]
    if not outcomes:
        _fail(
            f"{', '.join(map(str, results))}: no graded decision points (result lines with 'points': run "
            "retryctl batch or retryctl eval on tasks with 'gold')"
        )
    try:
        check_output(out, what="calibration file", inputs=[(p, "results file") for p in results])
    except PathError as exc:
        _fail(str(exc))
    tested = [o for o in outcomes if split_of(o.task, holdout, seed)]
    fitted_on = [o for o in outcomes if not split_of(o.task, holdout, seed)]
    if not fitted_on:
        _fail(f"--holdout {holdout}: every task fell in the held-out part; lower it")
    tasks = len({o.task for o in fitted_on})
    warnings: list[str] = []
    if len(fitted_on) < MIN_FIT_POINTS:
        warnings.append(
            f"fitted on {len(fitted_on)} decision points of {tasks} tasks, fewer than {MIN_FIT_POINTS}: "
            f"each step of the curve is a few outcomes and the {len(tested)} held-out points test it "
            "little; grade more tasks (retryctl eval) before trusting it"
        )
    if holdout > 0 and not tested:
        warnings.append(
            f"too few tasks to hold any out: {len({o.task for o in outcomes})} tasks, holdout {holdout}; "
            "the fit is written untested (the figures below are '-'): grade more tasks"
        )
    for warning in warnings:
        typer.echo(f"warning: {warning}", err=True)
    files = ", ".join(dict.fromkeys(_shown_path(p) for p in results))
    calibration = fit_calibration(
        fitted_on,
        source=f"{len(fitted_on)} graded decision points of {tasks} tasks ({files})",
        balance_strata=balance_strata,
    )
    save_calibration(calibration, out)
    raw = [(o.raw, o.correct) for o in tested]
    mapped = [(calibration(o.raw, o.member), o.correct) for o in tested]
    report: dict[str, Any] = {
        "out": str(out),
        "fitted_on": len(fitted_on),
        "held_out": len(tested),
        "curves": {name: curve.n for name, curve in calibration.curves.items()},
        "ece_raw": ece(raw),
        "ece_calibrated": ece(mapped),
        "brier_raw": brier(raw),
        "brier_calibrated": brier(mapped),
        "balance_strata": balance_strata,
        "by_stratum": by_stratum(tested, calibration),
        "warnings": warnings,
    }
    if shift:
        report["shift"] = transfer(outcomes)
    if as_json:
        typer.echo(json.dumps(report, indent=2))
        return
    _print(report, len(tested), len(fitted_on))


def _shown_path(path: Path) -> str:
    """``path`` relative to the working directory where it is under it, else absolute: two files of one
    name in two folders stay two names in the calibration's source."""
    absolute = path.resolve()
    try:
        return str(absolute.relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(absolute)


def _cell(value: float | None) -> str:
    return cell(value)


def _print(report: dict[str, Any], tested: int, fitted_on: int) -> None:
    console = table_console()
    table = Table(title=f"calibration on {tested} held-out decision points (fitted on {fitted_on})")
    for column in ("", "ECE", "Brier"):
        table.add_column(column, justify="right")
    table.add_row("raw fused confidence", _cell(report["ece_raw"]), _cell(report["brier_raw"]))
    table.add_row("calibrated", _cell(report["ece_calibrated"]), _cell(report["brier_calibrated"]))
    console.print(table)
    strata = {k: v for k, v in report["by_stratum"].items() if k != "all"}
    if strata:
        table = Table(title="held-out ECE by stratum")
        for column in ("stratum", "points", "tasks", "ECE raw", "ECE calibrated"):
            table.add_column(column, justify="right")
        for name, row in strata.items():
            table.add_row(
                name,
                str(row["points"]),
                str(row["tasks"]),
                _cell(row["ece_raw"]),
                _cell(row["ece_calibrated"]),
            )
        console.print(table)
    if "shift" in report:
        _print_shift(console, report["shift"])
    curves = ", ".join(f"{name} ({n} points)" for name, n in report["curves"].items())
    console.print(f"wrote {report['out']}: curves {curves}", soft_wrap=True)


def _print_shift(console: Console, rows: list[dict[str, Any]]) -> None:
    if not rows:
        console.print("--shift: the results name fewer than two strata; nothing to shift between")
        return
    table = Table(title="ECE under shift: fit on some strata, test on the others")
    table.add_column("split", no_wrap=True)
    for column in ("points", "raw", "calibrated", "pooled fit"):
        table.add_column(column, justify="right", no_wrap=True)
    for row in rows:
        table.add_row(
            row["name"],
            f"{row['fitted_on']}/{row['tested_on']}",
            _cell(row["ece_raw"]),
            _cell(row["ece_calibrated"]),
            _cell(row["ece_pooled_fit"]),
        )
    console.print(table)
    halves = next((r for r in rows if r["name"] == "hard -> easy"), None)
    if halves is not None:
        console.print(
            f"hard: {', '.join(halves['fit_on'])}; easy: {', '.join(halves['test_on'])}", soft_wrap=True
        )
    console.print(
        "points: fitted on / tested on. ECE of the raw fused confidence, of the fit retryctl calibrate "
        "writes (strata weighted equally) and of a pooled fit (every decision point alike).",
        soft_wrap=True,
    )
