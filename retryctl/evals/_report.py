"""The figures of a graded run, the agent beside its baselines, overall and by stratum; as a table,
as JSON and as an HTML page with a reliability diagram and the risk–coverage curves."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from html import escape
from typing import Any

from retryctl._scores import Graded, Scores, scores
from retryctl.batch._outcome import graded_outcomes
from retryctl.evals._frontier import selective

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


_COLUMNS = ("n", "accuracy", "coverage", "accepted_precision", "ece", "brier", "auroc")
_SIZE, _PAD = 320, 40
_COLOURS = ("#d62728", "#1f77b4", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b")


def _at(x: float, y: float) -> tuple[float, float]:
    return _PAD + x * _SIZE, _PAD + (1 - y) * _SIZE


def _text(x: float, y: float, text: str, extra: str = "") -> str:
    return f'<text x="{x:.0f}" y="{y:.0f}" font-size="11" {extra}>{escape(text)}</text>'


def _plot(
    title: str, axes: tuple[str, str], series: dict[str, list[tuple[float, float]]], *, diagonal: bool
) -> str:
    """Lines with dots on the unit square, one colour per series, a legend on the right.

    By hand rather than with the audit's charts (:mod:`retryctl.report._svg`), which draw one series
    of bars, cells or dots: these compare several systems on one square, with the diagonal.
    """
    mid = _PAD + _SIZE / 2
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{_SIZE + 2 * _PAD + 160}" '
        f'height="{_SIZE + 2 * _PAD}" role="img" aria-label="{escape(title)}">',
        f'<rect x="{_PAD}" y="{_PAD}" width="{_SIZE}" height="{_SIZE}" fill="none" stroke="#999"/>',
        _text(_PAD, _PAD - 12, title, 'font-weight="bold"'),
        _text(mid, _SIZE + _PAD + 30, axes[0], 'text-anchor="middle"'),
        _text(12, mid, axes[1], f'text-anchor="middle" transform="rotate(-90 12 {mid:.0f})"'),
    ]
    if diagonal:
        (x0, y0), (x1, y1) = _at(0, 0), _at(1, 1)
        parts.append(f'<line x1="{x0}" y1="{y0}" x2="{x1}" y2="{y1}" stroke="#bbb" stroke-dasharray="4"/>')
    for i, (name, points) in enumerate(series.items()):
        colour = _COLOURS[i % len(_COLOURS)]
        spots = [_at(x, y) for x, y in points]
        line = " ".join(f"{x:.1f},{y:.1f}" for x, y in spots)
        parts.append(f'<polyline points="{line}" fill="none" stroke="{colour}" stroke-width="2"/>')
        parts += [f'<circle cx="{x:.1f}" cy="{y:.1f}" r="3" fill="{colour}"/>' for x, y in spots]
        parts.append(_text(_SIZE + _PAD + 10, _PAD + 16 * (i + 1), name, f'fill="{colour}"'))
    parts.append("</svg>")
    return "".join(parts)


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


def render_html(report: Mapping[str, Any], *, title: str) -> str:
    """One self-contained page: the figures, the reliability diagram of accepted answers and the
    risk–coverage curve of every system."""
    head = "".join(f"<th>{escape(c)}</th>" for c in ("system", *_COLUMNS))
    body = "".join(
        "<tr>"
        + f"<td>{escape(name)}</td>"
        + "".join(f"<td>{_fmt(row.get(c))}</td>" for c in _COLUMNS)
        + "</tr>"
        for name, row in report["systems"].items()
    )
    strata = ""
    for stratum, rows in report["strata"].items():
        strata += (
            f"<h3>{escape(stratum)}</h3><table><tr>{head}</tr>"
            + "".join(
                "<tr>"
                + f"<td>{escape(name)}</td>"
                + "".join(f"<td>{_fmt(row.get(c))}</td>" for c in _COLUMNS)
                + "</tr>"
                for name, row in rows.items()
            )
            + "</table>"
        )
    curves = report["curves"]
    reliability = _plot(
        "Reliability of accepted answers (equal-mass bins)",
        ("mean confidence", "share right"),
        {name: [(x, y) for x, y, _ in c["reliability"]] for name, c in curves.items()},
        diagonal=True,
    )
    risk = _plot(
        "Risk against coverage (answering the most confident first)",
        ("coverage", "share wrong"),
        {name: [(x, y) for x, y in c["risk_coverage"]] for name, c in curves.items()},
        diagonal=False,
    )
    return (
        "<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>"
        f"<title>{escape(title)}</title><style>body{{font-family:sans-serif}}td,th{{padding:2px 8px;"
        "text-align:right}}td:first-child{text-align:left}</style></head><body>"
        f"<h1>{escape(title)}</h1><table><tr>{head}</tr>{body}</table>"
        f"<h2>Reliability diagram</h2>{reliability}<h2>Risk–coverage</h2>{risk}"
        f"{_selective_html(report.get('selective'))}"
        f"<h2>By stratum</h2>{strata}</body></html>"
    )
