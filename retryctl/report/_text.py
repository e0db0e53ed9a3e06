"""The audit for a terminal: rich tables for the summary and the diff, built from the JSON sections."""

from __future__ import annotations

from typing import Any

from rich.console import Console, Group, RenderableType
from rich.table import Table
from rich.text import Text

from retryctl._scores import figure_rows
from retryctl.audit import VerifyReport

__all__ = ["render_diff", "render_summary", "render_verification"]


def _num(value: Any) -> str:
    if value is None:
        return "—"
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def _tokens(value: float) -> str:
    """A token count, whole as counts are (thousands separated), else as :func:`_num` shows it."""
    return f"{value:,.0f}" if float(value).is_integer() else _num(value)


def render_verification(reports: list[VerifyReport]) -> RenderableType:
    """One line per log: intact (records, runs, head) or the first broken record."""
    lines = []
    for r in reports:
        if r.ok:
            lines.append(
                Text.assemble(
                    ("✓ ", "green"),
                    f"{r.path}: chain intact, {r.records} records, {r.runs} runs, head {r.head[:16]}…",
                )
            )
        else:
            lines.append(Text.assemble(("✗ ", "bold red"), f"{r.path}: chain BROKEN: {r.error}"))
    return Group(*lines)


def _kv_table(title: str, rows: list[tuple[str, Any]], headers: tuple[str, str]) -> Table:
    table = Table(title=title, title_justify="left")
    table.add_column(headers[0])
    table.add_column(headers[1], justify="right")
    for k, v in rows:
        table.add_row(str(k), _num(v))
    return table


def _stop_reasons_table(rows: list[dict[str, Any]]) -> Table:
    """One row per reason shape; a budget stop names its budget, so each budget is a row of its own."""
    table = Table(title="Stop reasons (steps ending in stop/ask_user)", title_justify="left")
    table.add_column("budget")
    table.add_column("reason (example)")
    table.add_column("steps", justify="right")
    for r in rows:
        table.add_row(r.get("budget") or "—", str(r["reason"]), _num(r["steps"]))
    return table


def render_summary(summary: dict[str, Any], console: Console) -> None:
    """Print every audit section."""
    ov = summary["overview"]
    console.print(
        f"{ov['records']} records ({ov['verdict_records']} verdicts, {ov['summary_records']} summaries, "
        f"{ov['repair_records']} repairs) · {ov['runs']} runs · {ov['steps']} steps"
    )
    if ov["undecodable_lines"]:
        console.print(f"[red]undecodable lines skipped:[/red] {', '.join(ov['undecodable_lines'][:5])}")
    for bad in ov.get("invalid_records", [])[:5]:
        console.print(Text.assemble(("invalid record skipped: ", "red"), bad), soft_wrap=True)
    console.print(_kv_table("Step outcomes", list(ov["step_outcomes"].items()), ("last verdict", "steps")))
    console.print(_kv_table("Verdicts", list(summary["verdicts"].items()), ("action", "count")))
    if summary["stop_reasons"]:
        console.print(_stop_reasons_table(summary["stop_reasons"]))
    per_step = Table(title="Samples and attempts per step", title_justify="left")
    for col in ("step", "runs", "accepted", "avg samples", "max samples", "avg attempts", "usd"):
        per_step.add_column(col, justify="left" if col == "step" else "right")
    for r in summary["per_step"][:15]:
        per_step.add_row(
            r["step_id"],
            _num(r["runs"]),
            _num(r["accepted"]),
            _num(r["avg_samples"]),
            _num(r["max_samples"]),
            _num(r["avg_attempts"]),
            _num(r["usd"]),
        )
    console.print(per_step)
    cost = summary["cost"]
    by_target = Table(
        title=(
            f"Cost by model and tool ({cost['total_samples']:g} samples, "
            f"{_tokens(cost['total_input_tokens'])} input and {_tokens(cost['total_output_tokens'])} "
            f"output tokens, ${cost['total_usd']:.4f})"
        ),
        title_justify="left",
    )
    for col in ("target", "kind", "attempts", "samples", "input tokens", "output tokens", "usd"):
        by_target.add_column(col, justify="left" if col in ("target", "kind") else "right")
    for r in cost["by_target"][:15]:
        by_target.add_row(
            r["target"],
            r["kind"],
            _num(r["attempts"]),
            _num(r["samples"]),
            _tokens(r["input_tokens"]),
            _tokens(r["output_tokens"]),
            _num(r["usd"]),
        )
    console.print(by_target)
    _print_unchecked(summary["unchecked"], console)
    bh = summary["black_holes"]
    console.print(
        f"[bold]Budget black holes:[/bold] {bh['steps']} steps in the top tenth by {bh['unit']} "
        "ended without "
        f"an accepted answer, spending {bh['share']:.3f} of all {bh['unit']}."
    )
    for t in bh["top"][:5]:
        console.print(
            f"  {t['run_id']}/{t['step_id']}: {_num(t['spent'])} {bh['unit']}, {t['outcome']}: {t['reason']}"
        )
    console.print("[bold]Threshold hints:[/bold]" + ("" if summary["threshold_hints"] else " none"))
    for h in summary["threshold_hints"]:
        console.print(f"  {h['text']}")
    acc = summary["accuracy"]
    if acc is not None:
        # The rows of `batch`'s summary table, by the same labels and cells (retryctl._scores).
        figures = _kv_table("Figures", [("steps with gold", acc["graded"])], ("figure", "value"))
        for label, value in figure_rows(acc):
            figures.add_row(label, value)
        # Every try's samples (an interrupted one's too): `batch`'s figure counts the finishing try only.
        figures.add_row("average samples (all tries)", f"{acc['avg_samples']:.2f}")
        console.print(figures)


def _print_unchecked(section: dict[str, Any], console: Console) -> None:
    """The accepts no check ran on: a line, and where there are some, where they are."""
    share = "" if section["share"] is None else f" (share {section['share']:.3f})"
    console.print(
        f"[bold]Unchecked accepts:[/bold] {section['unchecked']} of {section['accepts']}{share}: "
        "no check ran on their result, so they claim no confidence"
    )
    if not section["unchecked"]:
        return
    for title, rows, name in (
        ("by model and tool", section["by_target"], "target"),
        ("by step", section["by_step"], "step_id"),
    ):
        table = Table(title=f"Unchecked accepts {title}", title_justify="left")
        for col in (name.replace("_id", ""), "accepts", "unchecked", "share"):
            table.add_column(col, justify="left" if col in ("target", "step") else "right")
        for r in [r for r in rows if r["unchecked"]][:10]:  # the lists put these first
            table.add_row(r[name], _num(r["accepts"]), _num(r["unchecked"]), f"{r['share']:.3f}")
        console.print(table)


def render_diff(diff: dict[str, Any], console: Console) -> None:
    """Print two sides' figures and their difference."""
    a, b, delta = diff["a"], diff["b"], diff["delta"]
    table = Table(title=f"diff: A = {a['name']}  ·  B = {b['name']}", title_justify="left")
    for col in ("figure", "A", "B", "B − A"):
        table.add_column(col, justify="left" if col == "figure" else "right")
    for key in (
        "steps",
        "accept_rate",
        "accuracy",
        "ungated_accuracy",
        "graded",
        "avg_samples",
        "avg_attempts",
        "total_samples",
        "usd",
    ):
        table.add_row(key, _num(a[key]), _num(b[key]), _num(delta[key]))
    for action in sorted(set(a["verdicts"]) | set(b["verdicts"])):
        table.add_row(
            f"verdicts: {action}",
            _num(a["verdicts"].get(action, 0)),
            _num(b["verdicts"].get(action, 0)),
            _num(delta["verdicts"][action]),
        )
    console.print(table)
