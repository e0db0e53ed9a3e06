"""``retryctl audit``: verify decision logs' hash chains and explain what the controller did.

Exit codes: 0 every chain is intact; 1 a chain is broken (the first broken record is named; the
readable part is still analysed, records of the wrong shape skipped and named); 2 a usage error (a
missing file, a file that is not a decision log at all, a FIFO or device, an unknown run id, an
``--html`` path that is a LOG or cannot be written) or a log whose chain verifies but whose records do
not fit the schema (the first such line and field are named).
"""

from __future__ import annotations

import gc
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, NoReturn

import typer

from retryctl._paths import PathError, check_input, check_output
from retryctl.audit import VerifyReport
from retryctl.cli import _ending
from retryctl.report import (
    PARALLEL_MIN_BYTES,
    Analysis,
    analyse,
    audit_log,
    audit_summary,
    start_verification,
    summarise,
)

# rich (for the tables) and the diff, story and HTML code are imported where they are used: `retryctl
# audit LOG --json` needs none of them and starts ~20 ms sooner without them.

__all__ = ["audit"]

_BROKEN_EXIT = 1
_USAGE_EXIT = 2
_SNIFF_LINES = 20
"""Lines read to tell a decision log from another file: a log with its first records damaged still has
others carrying ``hash`` and ``prev_hash`` among them (that is a broken chain, exit 1, not exit 2)."""


def _fail(message: str) -> NoReturn:
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(_USAGE_EXIT)


def _report_json(r: VerifyReport) -> dict[str, Any]:
    error = None
    if r.error is not None:
        error = {
            "line": r.error.line,
            "index": r.error.index,
            "problem": r.error.problem,
            "message": str(r.error),
        }
    return {"path": r.path, "ok": r.ok, "records": r.records, "runs": r.runs, "head": r.head, "error": error}


def _diff(analysis: Analysis | None, logs: list[str], a: str, b: str) -> dict[str, Any]:
    """Two logs when both name files, else two run ids within ``logs``."""
    from retryctl.report import diff_sides, side_figures

    if os.path.isfile(a) and os.path.isfile(b):
        return diff_sides(a, side_figures(analyse([a])), b, side_figures(analyse([b])))
    if analysis is None:
        _fail(f"--diff {a} {b}: neither is a log file, and no LOG was given to find them as run ids in")
    runs = {s.run_id for s in analysis.steps.values()}
    for run in (a, b):
        if run not in runs:
            _fail(f"--diff: {run!r} is neither a log file nor a run id in {', '.join(logs)}")
    return diff_sides(a, side_figures(analysis, run_id=a), b, side_figures(analysis, run_id=b))


def _check_files(paths: list[str], html: Path | None) -> None:
    """Every LOG a regular file; ``--html`` writable, and none of them."""
    for p in paths:
        if os.path.isdir(p):
            _fail(f"{p}: is a directory; give the decision log files in it (e.g. {p}/*.jsonl)")
        if not os.path.exists(p):
            _fail(f"{p}: no such log file")
        try:
            check_input(p, "LOG")
        except PathError as exc:
            _fail(str(exc))
        why = _not_a_log(p)
        if why is not None:
            _fail(f"{p}: not a decision log ({why}); retryctl audit reads the JSONL a DecisionLog writes")
    if html is not None:
        try:
            check_output(html, "--html", inputs=[(p, "LOG") for p in paths])
        except PathError as exc:
            _fail(str(exc))


def _not_a_log(path: str) -> str | None:
    """Why ``path`` is not a decision log, or ``None`` when it could be one: a log's records are JSON
    objects with ``hash`` and ``prev_hash``; none among the first lines has them in a results file, a
    task file, a bank, or text. An empty file is an empty log (a run that wrote nothing yet)."""
    seen = 0
    first = ""
    torn = False
    obj: object = None
    with open(path, "rb") as f:
        for raw in f:
            if not raw.strip():
                continue
            seen += 1
            try:
                obj = json.loads(raw)
            except ValueError:
                obj = None
            if isinstance(obj, dict) and "hash" in obj and "prev_hash" in obj:
                return None
            if not first:
                first = "not JSON" if obj is None else "JSON without 'hash' and 'prev_hash'"
            torn = not raw.endswith(b"\n")
            if seen >= _SNIFF_LINES or torn:
                break
    if not seen or (seen == 1 and torn and obj is None):
        return None  # empty, or one line cut short by a crash: verification names the torn tail
    return f"its first {'line is' if seen == 1 else f'{seen} lines are'} {first}"


def _check_invalid(invalid: list[str], *, broken: bool) -> None:
    """Records of the wrong shape: exit 2 naming the first when every chain verifies, else a warning."""
    if not invalid:
        return
    more = f" (and {len(invalid) - 1} more)" if len(invalid) > 1 else ""
    if broken:
        typer.echo(f"warning: invalid record skipped: {invalid[0]}{more}", err=True)
        return
    _fail(f"{invalid[0]}{more}: the chain verifies, but the record does not fit the decision-log schema")


def _why(names: list[str], run_id: str, invalid: list[str]) -> dict[str, Any]:
    """The ``--why`` story of ``run_id``; records of the run that do not fit the schema go to ``invalid``."""
    from retryctl.report import run_story, story_lines

    story_invalid: list[str] = []
    events = run_story(names, run_id, invalid=story_invalid)
    invalid += [bad for bad in story_invalid if bad not in invalid]
    if not events and not story_invalid:
        _fail(f"--why: no record of run {run_id!r} in {', '.join(names) or 'the logs'}")
    return {"run_id": run_id, "events": events, "story": story_lines(events)}


def _write_html(
    html: Path, analysis: Analysis | None, summary: dict[str, Any] | None, reports: list[VerifyReport]
) -> str:
    """Write the ``--html`` report; its path as given."""
    if analysis is None or summary is None:
        _fail("--html needs at least one LOG")
    from retryctl.report import render_html

    try:
        html.write_text(render_html(analysis, summary, reports), encoding="utf-8")
    except OSError as exc:
        _fail(f"--html {html}: cannot write the report: {exc.strerror or exc}")
    return os.fspath(html)


def _print_tables(out: dict[str, Any], reports: list[VerifyReport]) -> None:
    """What ``audit`` prints without ``--json``: ``out`` as tables and text."""
    from rich.console import Console

    from retryctl.report import render_diff, render_summary, render_verification

    console = Console()
    console.print(render_verification(reports), soft_wrap=True)
    if "why" in out:
        console.print(f"[bold]Run {out['why']['run_id']}[/bold]")
        for line in out["why"]["story"]:
            console.print(line, markup=False, highlight=False, soft_wrap=True)
    elif "diff" in out:
        render_diff(out["diff"], console)
    elif "summary" in out:
        render_summary(out["summary"], console)
    if "html" in out:
        console.print(f"HTML report written to {out['html']}")


def audit(
    ctx: typer.Context,
    logs: Annotated[
        list[Path] | None, typer.Argument(help="Decision logs (JSONL) to audit.", show_default=False)
    ] = None,
    *,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object instead of tables.")] = False,
    html: Annotated[
        Path | None, typer.Option("--html", help="Write a self-contained HTML report with plots.")
    ] = None,
    why: Annotated[
        str | None, typer.Option("--why", help="Tell one run's story, verdict by verdict.")
    ] = None,
    diff: Annotated[
        tuple[str, str] | None,
        typer.Option(
            "--diff", metavar="A B", help="Compare two logs (e.g. two policies) or two run ids of the LOGs."
        ),
    ] = None,
) -> None:
    """Verify decision logs' hash chains and summarise what the controller decided, and why."""
    # Started by `retryctl.cli.main`, this command ends the process itself once its output is written,
    # without freeing what it built (see `_ending`): the cyclic collector stays off to the end too,
    # since a collection after a million-record pass would walk every object built during it (60 ms)
    # for no garbage. Run in-process (tests, embedding), it returns and frees as usual.
    own_process = _ending.own_process(ctx)
    if own_process:
        gc.disable()
    names = [os.fspath(p) for p in logs or []]
    if not names and diff is None:
        _fail("give at least one LOG (or --diff LOG_A LOG_B)")
    diff_logs = list(diff) if diff is not None and all(map(os.path.isfile, diff)) else []
    to_verify = names + [p for p in diff_logs if p not in names]
    _check_files(to_verify, html)
    analysis: Analysis | None = None
    summary: dict[str, Any] | None = None
    big = len(names) == 1 and to_verify == names and os.path.getsize(names[0]) >= PARALLEL_MIN_BYTES
    if big and html is None and diff is None:
        # One large log, only its summary wanted: one pass checks the chain and folds the records,
        # split over two processes that each total their own steps.
        audited = audit_summary(names[0], min_bytes=0)  # held to the end: it holds the audit's heap
        report, summary = audited
        pending: Callable[[], list[VerifyReport]] = lambda: [report]  # noqa: E731
    elif big:
        report, analysis = audit_log(names[0], min_bytes=0)
        pending = lambda: [report]  # noqa: E731
    else:
        # Verification runs in a second process for large logs while this one analyses them.
        pending = start_verification(to_verify)
        analysis = analyse(names) if names else None
    diff_result = _diff(analysis, names, *diff) if diff is not None else None
    if analysis is not None:
        summary = summarise(analysis)
    reports = pending()
    broken = any(not r.ok for r in reports)
    invalid = list(summary["overview"].get("invalid_records", [])) if summary is not None else []
    out: dict[str, Any] = {"verification": [_report_json(r) for r in reports], "ok": not broken}
    if summary is not None:
        out["summary"] = summary
    if why is not None:
        out["why"] = _why(names, why, invalid)
    _check_invalid(invalid, broken=broken)  # before anything is written
    if diff_result is not None:
        out["diff"] = diff_result
    if html is not None:
        out["html"] = _write_html(html, analysis, summary, reports)

    if as_json:
        typer.echo(json.dumps(out, indent=2, ensure_ascii=False))
    else:
        _print_tables(out, reports)
    code = _BROKEN_EXIT if broken else 0
    if own_process:
        _ending.hard_exit(code)  # here, while `analysis` and `audited` still hold what was built
    if code:
        raise typer.Exit(code)
