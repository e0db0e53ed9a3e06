"""The figures of a graded run, the agent beside its baselines, overall and by stratum; as a table,
as JSON and as an HTML page with a reliability diagram and the risk–coverage curves."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from html import escape
from typing import Any

from retryctl._scores import FIGURES, LABELS, Graded, Scores, cell, scores
from retryctl.batch._outcome import graded_outcomes
from retryctl.evals._frontier import selective
from retryctl.report._svg import CHART_CSS, line_chart

__all__ = ["AGENT", "evaluation", "render_html"]

AGENT = "agent"
"""The name of the agent's row (the baselines' rows are ``model@20``, ``calculator@8``, ...)."""


def _baseline_outcomes(lines: Iterable[Mapping[str, Any]]) -> dict[str, list[Graded]]:
    out: dict[str, list[Graded]] = {}
    for line in lines:
        for name, system in (line.get("systems") or {}).items():
            if "correct" not in system:
                continue
            out.setdefault(name, []).append(
                Graded(
                    confidence=float(system.get("confidence") or 0.0),
                    correct=bool(system["correct"]),
                    accepted=system.get("answer") is not None,
                    stratum=str(line.get("stratum") or ""),
                )
            )
    return out


def _by_stratum(graded: list[Graded]) -> dict[str, Scores]:
    strata = sorted({g.stratum for g in graded if g.stratum})
    return {s: scores(g for g in graded if g.stratum == s) for s in strata}


def evaluation(agent: Iterable[Mapping[str, Any]], baselines: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """Every system's figures: ``{"systems": {name: summary}, "strata": {stratum: {name: summary}},
    "curves": {name: {"reliability": ..., "risk_coverage": ...}}, "selective": ...}``, the last the
    precision of each at fixed coverages, the agent's point against its members' curves and the oracle
    (:func:`~retryctl.evals.selective`)."""
    rows = list({str(r.get("id")): r for r in agent}.values())  # a resumed task counts by its last line
    lines = list(baselines)
    systems = {AGENT: graded_outcomes(rows), **_baseline_outcomes(lines)}
    figures = {name: scores(g) for name, g in systems.items() if g}
    strata: dict[str, dict[str, Any]] = {}
    for name, graded in systems.items():
        for stratum, s in _by_stratum(graded).items():
            strata.setdefault(stratum, {})[name] = s.summary()
    return {
        "systems": {name: s.summary() for name, s in figures.items()},
        "strata": strata,
        "curves": {
            name: {"reliability": s.reliability, "risk_coverage": s.risk_coverage}
            for name, s in figures.items()
        },
        "selective": selective(figures, lines, agent=AGENT),
    }


def _fmt(value: Any) -> str:
    return "-" if value is None else f"{value:.3f}" if isinstance(value, float) else str(value)


_COLUMNS = ("n", *FIGURES)
"""The columns of ``retryctl eval``'s table, in its order and by its labels (:data:`LABELS`)."""
_STYLE = (
    "body{font:14px/1.4 system-ui,sans-serif;margin:24px;color:#222;max-width:1100px}"
    "table{border-collapse:collapse;margin:8px 0}td,th{padding:2px 8px;text-align:right;"
    "border:1px solid #ddd}th{background:#f4f4f4}td:first-child{text-align:left}"
)


def _selective_html(figures: Mapping[str, Any] | None) -> str:
    """Precision at the fixed coverages, the oracle rows and the agent's point against its members."""
    if not figures:
        return ""
    coverages = [str(c) for c in figures["coverages"]]
    head = "".join(
        f"<th>{escape(h)}</th>" for h in ("system", *(f"P@{c}" for c in coverages), "coverage", "precision")
    )
    rows = [
        (name, [row["precision_at"][c] for c in coverages], row["coverage"], row["precision"])
        for name, row in figures["systems"].items()
    ]
    rows += [
        (f"oracle: a {'majority' if kind == 'majority' else 'sample'} right",
         [row["precision_at"][c] for c in coverages], row["answerable"], 1.0)
        for kind, row in figures["oracle"].items()
    ]  # fmt: skip
    body = "".join(
        f"<tr><td>{escape(name)}</td>" + "".join(f"<td>{_fmt(v)}</td>" for v in (*at, cov, prec)) + "</tr>"
        for name, at, cov, prec in rows
    )
    agent = figures.get("agent")
    point = ""
    if agent is not None and agent["best_member"] is not None:
        point = (
            f"<p>The agent at coverage {_fmt(agent['coverage'])}: precision {_fmt(agent['precision'])}; "
            f"the best member's curve there, {escape(agent['best_member'])}: "
            f"{_fmt(agent['best_member_precision'])} (gap {agent['gap']:+.3f}).</p>"
        )
    return f"<h2>Precision at coverage</h2><table><tr>{head}</tr>{body}</table>{point}"


def _same_points(systems: Mapping[str, Mapping[str, Any]]) -> str:
    """A note naming the systems whose operating points coincide (the same coverage and accepted
    precision): their rings are drawn one inside the other, and a reader should not have to guess."""
    groups: dict[tuple[float, float], list[str]] = {}
    for name, row in systems.items():
        if row.get("accepted_precision") is not None and row.get("coverage") is not None:
            key = (round(float(row["coverage"]), 6), round(float(row["accepted_precision"]), 6))
            groups.setdefault(key, []).append(name)
    notes = [
        f"{', '.join(names[:-1])} and {names[-1]} stand at the same point ({cov:.2f}, {prec:.2f}): "
        "coverage and accepted precision."
        for (cov, prec), names in groups.items()
        if len(names) > 1
    ]
    return "".join(f'<p class="note">{escape(n)}</p>' for n in notes)


def _rows(systems: Mapping[str, Mapping[str, Any]]) -> str:
    """One row per system, its cells as ``retryctl eval`` prints them (:func:`cell`)."""
    return "".join(
        f"<tr><td>{escape(name)}</td>"
        + "".join(f"<td>{escape(str(row[c]) if c == 'n' else cell(row.get(c)))}</td>" for c in _COLUMNS)
        + "</tr>"
        for name, row in systems.items()
    )


def render_html(report: Mapping[str, Any], *, title: str) -> str:
    """One self-contained page: the figures, the reliability diagram of accepted answers and the
    risk–coverage curve of every system."""
    head = "".join(f"<th>{escape(LABELS.get(c, c))}</th>" for c in ("system", *_COLUMNS))
    body = _rows(report["systems"])
    strata = "".join(
        f"<h3>{escape(stratum)}</h3><table><tr>{head}</tr>{_rows(rows)}</table>"
        for stratum, rows in report["strata"].items()
    )
    curves, systems = report["curves"], report["systems"]
    reliability = line_chart(
        {name: [(x, y) for x, y, _ in c["reliability"]] for name, c in curves.items()},
        title="Reliability of accepted answers (equal-mass bins)",
        x_label="mean confidence of the bin",
        y_label="share right",
        diagonal=True,
        legend_title="system",
    )
    marks = {
        name: (float(row["coverage"]), 1.0 - float(row["accepted_precision"]))
        for name, row in systems.items()
        if row.get("accepted_precision") is not None and name in curves
    }
    risk = line_chart(
        {name: [(x, y) for x, y in c["risk_coverage"]] for name, c in curves.items()},
        title="Risk against coverage (answering the most confident first)",
        x_label="coverage (share of the tasks answered)",
        y_label="risk (share of the answered that is wrong)",
        marks=marks,
        mark_label="its operating point",
        legend_title="system",
    )
    return (
        "<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>"
        f"<title>{escape(title)}</title><style>{_STYLE}{CHART_CSS}</style></head><body>"
        f"<h1>{escape(title)}</h1><table><tr>{head}</tr>{body}</table>"
        '<section class="panel" id="reliability"><h2>Reliability diagram</h2>'
        "<p>Each system's accepted answers in equal-mass bins of confidence, one point per bin. On the "
        "dashed diagonal a bin's confidence is its share right; below it, overconfident.</p>"
        f"{reliability}</section>"
        '<section class="panel" id="risk"><h2>Risk–coverage</h2>'
        "<p>Each curve answers a system's most confident tasks first: at each coverage, the share of "
        "the answered tasks that are wrong (lower is better). The ring on a curve is where the system "
        "itself stands: the share of tasks it answered and the share of those that were wrong "
        "(1 − accepted precision).</p>"
        f"{risk}{_same_points(systems)}</section>"
        f"{_selective_html(report.get('selective'))}"
        + (f"<h2>By stratum</h2>{strata}" if strata else "")
        + "</body></html>"
    )
