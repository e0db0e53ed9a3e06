"""A sweep shown: the columns its table prints (the CLI's and the page's, one list) and the page with
its curves against temperature, one line per setting of the other knobs that vary."""

from __future__ import annotations

from collections.abc import Sequence
from html import escape
from typing import Any

from retryctl._scores import MISSING
from retryctl.report._axes import nice_ticks
from retryctl.report._svg import CHART_CSS, line_chart

__all__ = ["STAGE_INDENT", "SWEEP_COLUMNS", "render_sweep_html", "sweep_cells", "sweep_rows"]

SWEEP_COLUMNS: tuple[tuple[str, str, str | None], ...] = (
    ("point", "point", None),
    ("majority accuracy", "majority_accuracy", ".3f"),
    ("default accuracy", "default_accuracy", ".3f"),
    ("default samples", "default_avg_samples", ".2f"),
    ("default tokens", "default_avg_tokens", ".1f"),
    ("mean len", "mean_tokens", ".1f"),
    ("p90 len", "p90_tokens", None),
    ("cut off", "length_rate", ".3f"),
    ("no answer", "parse_failure_rate", ".3f"),
    ("repeats", "repetition_rate", ".3f"),
)
"""(title, figure, format) of each column of ``retryctl sweep``'s table and of its page's; ``length_rate``
is the share of samples cut off at ``max_tokens`` (``finish["length"]``). A staged point's row is
followed by a row per stage (:func:`sweep_rows`) with the columns a stage has: length, cut off (at
the stage's own cap) and repeats."""

_STAGE_COLUMNS = ("mean_tokens", "p90_tokens", "length_rate", "repetition_rate")
STAGE_INDENT = "  "
"""What a stage's row of the table opens with, before the stage's name (under its point's row)."""

_KNOBS = (("top_p", "top_p"), ("min_p", "min_p"))


def sweep_cells(row: dict[str, Any]) -> list[str]:
    """One grid point's row of :data:`SWEEP_COLUMNS`, formatted as the table prints it."""
    view = {**row, "length_rate": (row.get("finish") or {}).get("length", 0.0)}
    return [
        MISSING if view.get(k) is None else str(view[k]) if spec is None else f"{view[k]:{spec}}"
        for _, k, spec in SWEEP_COLUMNS
    ]


def _stage_cells(stage: dict[str, Any]) -> list[str]:
    """A stage's row: its name under the point, its own figures, blank where a figure is the sample's."""
    cells = sweep_cells({**stage, "point": STAGE_INDENT + str(stage["name"])})
    keys = [key for _, key, _ in SWEEP_COLUMNS]
    return [cell if i == 0 or keys[i] in _STAGE_COLUMNS else "" for i, cell in enumerate(cells)]


def sweep_rows(rows: Sequence[dict[str, Any]]) -> list[list[str]]:
    """The table's rows: each point's :func:`sweep_cells`, then (a staged point) one row per stage."""
    out: list[list[str]] = []
    for row in rows:
        out.append(sweep_cells(row))
        out.extend(_stage_cells(stage) for stage in row.get("stages") or ())
    return out


def _setting(knob: str, value: float | None) -> str:
    return f"{knob} {value:g}" if value is not None else f"{knob} unset"


def _value(figures: dict[str, Any], key: str) -> float:
    if key == "length_rate":
        return float((figures.get("finish") or {}).get("length", 0.0))
    return float(figures.get(key) or 0.0)


def _series(
    rows: Sequence[dict[str, Any]], key: str, varying: list[str], *, by_stage: bool = False
) -> dict[str, list[tuple[float, float]]]:
    """One line per combination of the knobs that vary besides temperature, named by those knobs only;
    ``by_stage``: one per stage too, from a staged point's per-stage figures."""
    out: dict[str, list[tuple[float, float]]] = {}
    for row in rows:
        name = ", ".join(_setting(k, row[k]) for k in varying) or "every grid point"
        stages = row.get("stages") or [] if by_stage else []
        holders = [(f"{s['name']} stage" + (f", {name}" if varying else ""), s) for s in stages]
        for line, figures in holders or [(name, row)]:
            out.setdefault(line, []).append((float(row["temperature"]), _value(figures, key)))
    return {name: sorted(points) for name, points in out.items()}


def _charts(rows: Sequence[dict[str, Any]], varying: list[str]) -> str:
    """The charts against (the swept stage's) temperature, one line per setting of the other knobs."""
    staged = any(r.get("stages") for r in rows)
    temperatures = [float(r["temperature"]) for r in rows] or [0.0, 1.0]
    x_ticks = nice_ticks(min(temperatures), max(temperatures))
    longest = nice_ticks(0.0, max((float(r["mean_tokens"]) for r in rows), default=1.0) or 1.0)[-1]
    charts = [
        ("majority_accuracy", "Majority accuracy (all K samples)", "accuracy", 1.0, False),
        ("default_accuracy", "Default stopping policy's accuracy", "accuracy", 1.0, False),
        (
            "mean_tokens",
            "Mean length by stage" if staged else "Mean sample length",
            "tokens",
            longest,
            staged,
        ),
        ("parse_failure_rate", "Samples with no answer", "share of samples", 1.0, False),
    ]
    if staged:
        charts.append(("length_rate", "Cut off at the stage's cap", "share of samples", 1.0, True))
    swept = next((str(r["stage"]) for r in rows if r.get("stage")), None)
    x_label = "temperature" if swept is None else f"{swept} stage's temperature"
    plots: list[str] = []
    for key, chart_title, y_label, y_top, by_stage in charts:
        series = _series(rows, key, varying, by_stage=by_stage)
        several = len(series) > 1
        chart = line_chart(
            series,
            title=chart_title,
            x_label=x_label,
            y_label=y_label,
            x_range=(x_ticks[0], x_ticks[-1]),
            y_range=(0.0, y_top),
            width=560 if not several else 640,
            legend_width=190 if several else 24,
            legend=several,
        )
        plots.append(f"<div>{chart}</div>")
    return "".join(plots)


def _row_html(cells: list[str]) -> str:
    """A table row; a stage's (its name indented in the CLI's table) is indented by the page's style."""
    stage = cells[0].startswith(STAGE_INDENT)
    first = cells[0].removeprefix(STAGE_INDENT) if stage else cells[0]
    tds = "".join(f"<td>{escape(v)}</td>" for v in [first, *cells[1:]])
    return f'<tr class="stage">{tds}</tr>' if stage else f"<tr>{tds}</tr>"


def render_sweep_html(rows: Sequence[dict[str, Any]], *, title: str, heat_maps: str = "") -> str:
    """A page with the sweep's table (the rows the CLI prints), charts against temperature (a staged
    sweep's lengths and cut-offs by stage), then ``heat_maps``
    (:func:`~retryctl.record._sweep_tokens.sweep_heat_maps`) as a panel of its own."""
    head = "".join(f"<th>{escape(c)}</th>" for c, _, _ in SWEEP_COLUMNS)
    body = "".join(_row_html(cells) for cells in sweep_rows(rows))
    varying = [k for k, _ in _KNOBS if len({r[k] for r in rows}) > 1]
    fixed = [_setting(k, rows[0][k]) for k, _ in _KNOBS if k not in varying] if rows else []
    plots = _charts(rows, varying)
    knobs = "; ".join(fixed) if fixed else ""
    caption = (
        "Each chart is one figure of the table against temperature"
        + (f", one line per {' and '.join(varying)} setting" if varying else "")
        + (f". The same at every point: {knobs}." if knobs else ".")
        + " Unset (- in the point column): the backend's default."
    )
    style = (
        "body{font:14px/1.4 system-ui,sans-serif;margin:24px;color:#222;max-width:1400px}"
        "table{border-collapse:collapse;margin:8px 0}td,th{padding:2px 8px;text-align:right;"
        "border:1px solid #ddd}th{background:#f4f4f4}td:first-child,th:first-child{text-align:left}"
        "tr.stage td{color:#555}tr.stage td:first-child{padding-left:24px}"
    )
    return (
        f"<!doctype html><html lang='en'><head><meta charset='utf-8'><title>{escape(title)}</title>"
        f"<style>{style}{CHART_CSS}</style></head>"
        f"<body><h1>{escape(title)}</h1><table><tr>{head}</tr>{body}</table>"
        f'<section class="panel" id="curves"><h2>Against temperature</h2><p>{escape(caption)}</p>'
        f'<div class="charts">{plots}</div></section>'
        + (f'<section class="panel" id="tokens">{heat_maps}</section>' if heat_maps else "")
        + "</body></html>"
    )
