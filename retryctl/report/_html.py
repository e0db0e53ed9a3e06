"""The self-contained HTML report: the audit's sections as tables, and its plots as inline SVG.

No scripts, no external style sheets or fonts: the file opens offline and anywhere. Panels:
confidence histogram, samples per question, verdict flow, accuracy against cost (only when gold
answers were logged) and the per-token heat map (only when per-token data was logged; otherwise
the panel says so).
"""

from __future__ import annotations

from html import escape
from typing import Any

from retryctl._scores import cell
from retryctl.audit import VerifyReport
from retryctl.report._heatmap import token_map_html
from retryctl.report._model import CONFIDENCE_BINS, MAX_TOKEN_ROWS, Analysis
from retryctl.report._summary import figures_line
from retryctl.report._svg import CHART_CSS, bar_chart, heat_map, scatter

__all__ = ["render_html"]

_ACTIONS = ["accept", "refine", "retry", "switch", "ask_user", "stop"]
_STYLE = """
body { font: 14px/1.4 system-ui, sans-serif; margin: 24px; color: #222; max-width: 1100px; }
h1 { font-size: 22px; } h2 { font-size: 17px; margin-top: 28px; border-bottom: 1px solid #ddd; }
table { border-collapse: collapse; margin: 8px 0; } td, th { padding: 3px 10px; border: 1px solid #ddd; }
th { background: #f4f4f4; text-align: left; } td.n { text-align: right; font-variant-numeric: tabular-nums; }
.ok { color: #196c2e; font-weight: 600; } .bad { color: #b00020; font-weight: 600; }
.note { color: #666; font-style: italic; }
"""


def _whole(value: float) -> float | int:
    """A token count as an ``int`` when it is whole, so that it is shown in full (not as ``1.586e+04``)."""
    return int(value) if value.is_integer() else value


def _count(n: int, noun: str) -> str:
    """``1 step``, ``0 steps``, ``2 steps``."""
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def _table(headers: list[str], rows: list[list[Any]]) -> str:
    head = "".join(f"<th>{escape(h)}</th>" for h in headers)
    body = []
    for row in rows:
        cells = []
        for value in row:
            if isinstance(value, float):
                cells.append(f'<td class="n">{value:.4g}</td>')
            elif isinstance(value, int):
                cells.append(f'<td class="n">{value}</td>')
            else:
                cells.append(f"<td>{escape(str(value))}</td>")
        body.append("<tr>" + "".join(cells) + "</tr>")
    return f"<table><tr>{head}</tr>{''.join(body)}</table>"


def _panel(name: str, title: str, body: str) -> str:
    return f'<section class="panel" id="{name}"><h2>{escape(title)}</h2>{body}</section>'


def _verification(reports: list[VerifyReport]) -> str:
    rows = []
    for r in reports:
        state = '<span class="ok">intact</span>' if r.ok else '<span class="bad">BROKEN</span>'
        detail = escape(str(r.error)) if r.error else f"head {r.head[:16]}…"
        rows.append(
            f"<tr><td>{escape(r.path)}</td><td>{state}</td>"
            f"<td class='n'>{r.records}</td><td>{detail}</td></tr>"
        )
    return (
        "<table><tr><th>log</th><th>chain</th><th>records verified</th><th>detail</th></tr>"
        + "".join(rows)
        + "</table>"
    )


def _flow(analysis: Analysis) -> str:
    sources = ["start", *_ACTIONS]
    seen_to = {t for (_, t) in analysis.transitions}
    targets = [a for a in _ACTIONS if a in seen_to] + sorted(seen_to - set(_ACTIONS))
    seen_from = {f for (f, _) in analysis.transitions}
    rows = [s for s in sources if s in seen_from] + sorted(seen_from - set(sources))
    cells: list[list[float | None]] = [
        [float(analysis.transitions.get((f, t), 0)) or None for t in targets] for f in rows
    ]
    return heat_map(
        rows,
        targets,
        cells,
        title="Verdict flow: from (row) → next verdict (column)",
        x_label="next verdict →",
        y_label="verdict before ↓",
    )


def _tokens(analysis: Analysis) -> str:
    rows = analysis.token_rows
    if not rows:
        return (
            '<p class="note">No per-token data in these logs: the records carry no '
            "<code>token_samples</code>, <code>token_logprobs</code> or <code>token_entropy</code> (in a "
            "verdict's or summary's <code>extra</code>, or in <code>sampling_history</code> items), so "
            "there is no heat map. The policy's <code>token_log</code> writes them.</p>"
        )
    kinds = {r.kind for r in rows}
    note = (
        "<p class=\"note\">Where only the chosen tokens' logprobs were logged, a cell is the token's "
        "surprisal, not the entropy (which needs the distribution or its top-k).</p>"
        if "surprisal" in kinds
        else ""
    )
    full = len(rows) >= MAX_TOKEN_ROWS
    cap = f'<p class="note">The first {MAX_TOKEN_ROWS} logged candidates are drawn.</p>' if full else ""
    intro = (
        "<p>One row per logged candidate, one cell per token, darker where the model was less sure; "
        "✓ marks the candidate an accept returned. Hover a cell for its token, logprob, entropy and "
        "top-3 mass.</p>"
    )
    return intro + note + cap + token_map_html(rows)


def render_html(analysis: Analysis, summary: dict[str, Any], reports: list[VerifyReport]) -> str:
    """The whole report as one HTML document."""
    ov = summary["overview"]
    parts = [
        "<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>",
        f"<title>retryctl audit</title><style>{_STYLE}{CHART_CSS}</style></head><body>",
        "<h1>retryctl audit</h1>",
        _panel("verification", "Hash chain", _verification(reports)),
        _panel(
            "overview",
            "Overview",
            _table(
                ["records", "verdicts", "summaries", "runs", "steps"],
                [[ov["records"], ov["verdict_records"], ov["summary_records"], ov["runs"], ov["steps"]]],
            )
            + _table(["step outcome", "steps"], [[k, v] for k, v in ov["step_outcomes"].items()])
            + _table(["verdict", "count"], [[k, v] for k, v in summary["verdicts"].items()]),
        ),
    ]
    width = 1.0 / CONFIDENCE_BINS
    labels = [f"{i * width:.2f}" for i in range(CONFIDENCE_BINS)]
    parts.append(
        _panel(
            "confidence",
            "Confidence histogram",
            f"<p>The confidence each verdict was decided on (calibrated where a calibration is applied), "
            f"in {CONFIDENCE_BINS} bins of {width:.2f}: a bar starts at its bin's tick.</p>"
            + bar_chart(
                labels,
                [float(v) for v in analysis.confidence_hist],
                title="The confidence each verdict was decided on",
                x_label="confidence (bin start)",
                y_label="verdicts",
                bins=True,
            ),
        )
    )
    hist = summary["samples_hist"]
    parts.append(
        _panel(
            "samples",
            "Samples per question",
            bar_chart(
                [f"{k:g}" for k, _ in hist],
                [float(n) for _, n in hist],
                title="Samples used per step",
                x_label="samples",
                y_label="steps",
            ),
        )
    )
    parts.append(_panel("flow", "Verdict flow", _flow(analysis)))
    acc = summary["accuracy"]
    if acc is not None:
        points = [
            (float(p["samples"]), float(p["ungated_accuracy"]), float(p["steps"])) for p in acc["by_samples"]
        ]
        body = (
            f"<p>{escape(figures_line(acc))} over {acc['graded']} steps with gold answers, "
            f"{acc['avg_samples']:.2f} samples each on average.</p>"
            + scatter(
                points,
                title="Ungated accuracy against cost (samples per step; point size = steps)",
                x_label="samples used",
                y_label="ungated accuracy",
            )
        )
        parts.append(_panel("accuracy", "Accuracy against cost", body))
        if acc["reliability"]:
            bins = [
                (float(b["confidence"]), float(b["share_right"]), float(b["steps"]))
                for b in acc["reliability"]
            ]
            precision, ece = cell(acc["accepted_precision"]), cell(acc["ece"])
            body = (
                f"<p>Accepted steps: accepted precision {precision}; ECE of their confidence "
                f"{ece} (equal-mass bins). On the dashed diagonal a bin's confidence equals its share "
                "right; a point below it is overconfident, above it underconfident.</p>"
                + scatter(
                    bins,
                    title="Reliability of accepted steps (point size = steps in the bin)",
                    x_label="mean confidence of the bin",
                    y_label="share right",
                    x_max=1.0,
                    diagonal=True,
                )
            )
            parts.append(_panel("reliability", "Reliability diagram", body))
    parts.append(_panel("tokens", "Per-token uncertainty", _tokens(analysis)))
    parts.append(_sections(summary))
    parts.append("</body></html>")
    return "\n".join(parts)


def _sections(summary: dict[str, Any]) -> str:
    out = []
    hints = summary["threshold_hints"]
    out.append(
        _panel(
            "hints",
            "Threshold hints",
            "<ul>" + "".join(f"<li>{escape(h['text'])}</li>" for h in hints) + "</ul>"
            if hints
            else '<p class="note">No unaccepted step ended just under its threshold.</p>',
        )
    )
    bh = summary["black_holes"]
    body = (
        f"<p>{_count(bh['steps'], 'step')} in the top tenth by {bh['unit']} ended without an accepted "
        "answer, "
        f"spending {bh['share']:.3f} of all {bh['unit']}.</p>"
        + _table(
            ["run", "step", bh["unit"], "attempts", "outcome", "reason"],
            [
                [t["run_id"], t["step_id"], t["spent"], t["attempts"], t["outcome"], t["reason"]]
                for t in bh["top"]
            ],
        )
    )
    out.append(_panel("black_holes", "Budget black holes", body))
    out.append(
        _panel(
            "stop_reasons",
            "Stop reasons",
            _table(
                ["steps", "budget", "reason (example)"],
                [[r["steps"], r.get("budget") or "—", r["reason"]] for r in summary["stop_reasons"]],
            ),
        )
    )
    out.append(
        _panel(
            "per_step",
            "Samples and attempts per step",
            _table(
                ["step", "runs", "accepted", "avg samples", "max samples", "avg attempts", "usd"],
                [
                    [
                        r["step_id"],
                        r["runs"],
                        r["accepted"],
                        r["avg_samples"],
                        r["max_samples"],
                        r["avg_attempts"],
                        r["usd"],
                    ]
                    for r in summary["per_step"]
                ],
            ),
        )
    )
    cost = summary["cost"]
    out.append(
        _panel(
            "cost",
            "Cost by model and tool",
            f"<p>{cost['total_samples']:g} samples, {_whole(cost['total_input_tokens'])} input and "
            f"{_whole(cost['total_output_tokens'])} output tokens, ${cost['total_usd']:.4f} in all.</p>"
            + _table(
                ["target", "kind", "attempts", "samples", "input tokens", "output tokens", "usd"],
                [
                    [
                        r["target"],
                        r["kind"],
                        r["attempts"],
                        r["samples"],
                        _whole(r["input_tokens"]),
                        _whole(r["output_tokens"]),
                        r["usd"],
                    ]
                    for r in cost["by_target"]
                ],
            ),
        )
    )
    return "\n".join(out)
