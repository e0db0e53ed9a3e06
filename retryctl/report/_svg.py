"""Inline-SVG charts for the HTML reports of ``audit``, ``eval`` and ``sweep``: bars, a heat map,
sized points and lines with markers.

Why hand-written SVG rather than matplotlib or Vega-Lite (decided in issue 31, kept on purpose):
the reports must stay single files that open offline with no scripts. Vega-Lite draws in the browser,
so it needs its JavaScript runtime inlined (some 800 KB) and a script in every report; matplotlib is a
plotting stack of ~40 MB that takes about a second to import, and its SVG writes text as glyph paths
(unselectable, large) unless told otherwise. What made the first charts hard to read was missing ticks,
a diagonal not drawn, series hidden under one another and low contrast, not the medium: one shared
axis helper (:mod:`retryctl.report._axes`: round ticks, a padded plot area, axis titles, contrast-safe
text) fixes those for every chart in under 500 lines with no dependency. Every chart is one
``<svg class="chart">`` with a ``viewBox`` (so :data:`CHART_CSS` sizes it to the page), an
``aria-label`` and a ``<title>`` tooltip on each mark.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from html import escape

from retryctl.report._axes import (
    INK,
    MUTED,
    PAD,
    Frame,
    Scale,
    axes,
    fmt,
    nice_ticks,
    open_svg,
    text,
    text_on,
)

__all__ = ["CHART_CSS", "bar_chart", "heat_map", "line_chart", "scatter"]

CHART_CSS = """
svg.chart { display: block; width: 100%; max-width: 1040px; height: auto; margin: 8px 0; }
svg.chart text { font-family: system-ui, sans-serif; }
.charts { display: grid; grid-template-columns: repeat(auto-fit, minmax(460px, 1fr)); gap: 8px 24px; }
p.note { color: #555555; font-style: italic; }
"""
"""The charts' page style: as wide as the page up to 1040 px, height from the ``viewBox``."""

BAR = "#3b6fb6"
POINT = "#c8501e"
# Okabe–Ito's colour-blind-safe palette, darkest first; the name beside each is in INK, not in colour.
COLOURS = ("#0072b2", "#d55e00", "#009e73", "#cc79a7", "#000000", "#e69f00", "#56b4e9")
_MARKERS = ("circle", "square", "triangle", "diamond", "down", "plus", "cross")
_DASHES = ("", "7 4", "2 3", "10 3 2 3", "4 4", "1 2", "12 4")


def _color(frac: float) -> str:
    """White through orange to dark red (``#rrggbb``), for a value scaled to [0, 1]."""
    f = min(1.0, max(0.0, frac))
    return f"#{255 - int(80 * f):02x}{255 - int(215 * f):02x}{255 - int(235 * f):02x}"


def bar_chart(
    labels: Sequence[str],
    values: Sequence[float],
    *,
    title: str,
    x_label: str,
    y_label: str,
    bins: bool = False,
) -> str:
    """Vertical bars, one per label (the labels thinned out to about twelve when crowded). ``bins``:
    each label is its bin's start, so the bar spans from its tick to the next (a histogram) rather
    than being centred on it."""
    frame = Frame()
    whole = all(float(v).is_integer() for v in values)
    y_top = nice_ticks(0.0, max([*values, 1.0]), whole=whole)[-1]
    n = max(1, len(values))
    xs = Scale(0.0, float(n), frame.x0, frame.x1) if bins else Scale(-0.5, n - 0.5, frame.x0, frame.x1)
    ys = Scale(0.0, y_top, frame.y0, frame.y1)
    every = max(1, -(-n // 12))
    ticks = [(float(i), label) for i, label in enumerate(labels) if i % every == 0]
    parts = open_svg(title, frame.width, frame.height)
    parts += axes(frame, xs, ys, x_label=x_label, y_label=y_label, x_ticks=ticks, whole=whole)
    slot = xs(1.0) - xs(0.0)
    for i, (label, value) in enumerate(zip(labels, values, strict=True)):
        top, bottom = ys(value), ys(0.0)
        left = xs(i) if bins else xs(i) - slot * 0.4  # a bin's bar starts at its tick; the gap is after it
        parts.append(
            f'<rect class="bar" x="{left:.1f}" y="{top:.1f}" width="{slot * (0.9 if bins else 0.8):.1f}" '
            f'height="{bottom - top:.1f}" fill="{BAR}"><title>{escape(label)}: {fmt(value)}</title></rect>'
        )
    parts.append("</svg>")
    return "\n".join(parts)


def heat_map(
    rows: Sequence[str],
    cols: Sequence[str],
    cells: Sequence[Sequence[float | None]],
    *,
    title: str,
    show_values: bool = True,
    x_label: str = "",
    y_label: str = "",
) -> str:
    """A grid coloured by value (``None`` cells left blank), rows and columns labelled; a value
    written in a cell is black or white, whichever reads on that cell's colour."""
    left, top = 160, 64
    n_cols = max((len(r) for r in cells), default=0)
    cell_w = max(8.0, min(96.0, 680 / max(1, n_cols)))
    cell_h = 20 if len(rows) > 12 else 30
    width = max(int(left + cell_w * n_cols + 24), 880)
    height = int(top + cell_h * len(rows) + 24)
    parts = open_svg(title, width, height)
    peak = max((v for row in cells for v in row if v is not None), default=1.0) or 1.0
    if x_label:
        parts.append(text(left + cell_w * n_cols / 2, 42, x_label, anchor="middle", cls="axis-title"))
    if y_label:  # the corner: what the row labels are
        parts.append(text(left - 8, top - 6, y_label, anchor="end", cls="axis-title"))
    for j, col in enumerate(cols[:n_cols]):
        if n_cols <= 24 or j % max(1, n_cols // 24) == 0:
            x = left + (j + 0.5) * cell_w
            parts.append(text(x, top - 6, col, anchor="middle", cls="tick x", fill=MUTED, size=12))
    for i, (label, row) in enumerate(zip(rows, cells, strict=True)):
        y = top + i * cell_h
        parts.append(
            text(left - 8, y + cell_h * 0.65, label, anchor="end", cls="tick y", fill=MUTED, size=12)
        )
        for j, value in enumerate(row):
            if value is None:
                continue
            x, fill = left + j * cell_w, _color(value / peak)
            parts.append(
                f'<rect class="cell" x="{x:.1f}" y="{y}" width="{cell_w:.1f}" height="{cell_h}" '
                f'fill="{fill}" stroke="#ffffff"><title>{escape(label)} → '
                f"{escape(cols[j] if j < len(cols) else str(j))}: {fmt(value)}</title></rect>"
            )
            if show_values and cell_w >= 28 and value:
                parts.append(
                    text(x + cell_w / 2, y + cell_h * 0.65, fmt(value), anchor="middle", fill=text_on(fill))
                )
    parts.append("</svg>")
    return "\n".join(parts)


_R_MIN, _R_MAX = 4.0, 14.0
"""A scatter point's radius for the smallest and the largest weight."""


def scatter(
    points: Sequence[tuple[float, float, float]],
    *,
    title: str,
    x_label: str,
    y_label: str,
    y_max: float = 1.0,
    x_max: float | None = None,
    diagonal: bool = False,
) -> str:
    """Points ``(x, y, weight)``, the radius growing with the weight (e.g. how many steps a point is);
    ``diagonal`` draws y = x (a reliability diagram's perfect calibration)."""
    frame = Frame()
    x_top = x_max if x_max is not None else nice_ticks(0.0, max([p[0] for p in points] + [1.0]))[-1]
    # The largest point is wider than the scale's padding: inset the data further so that a point at
    # either end of an axis is drawn whole inside the frame, not across it.
    inset = max(0.0, _R_MAX + 2 - PAD)
    xs = Scale(0.0, x_top, frame.x0 + inset, frame.x1 - inset)
    ys = Scale(0.0, y_max, frame.y0 - inset, frame.y1 + inset)
    parts = open_svg(title, frame.width, frame.height)
    parts += axes(frame, xs, ys, x_label=x_label, y_label=y_label)
    if diagonal:
        end = min(x_top, y_max)
        parts.append(
            f'<line class="diagonal" x1="{xs(0):.1f}" y1="{ys(0):.1f}" x2="{xs(end):.1f}" y2="{ys(end):.1f}" '
            f'stroke="{MUTED}" stroke-dasharray="6 4"><title>perfect calibration: y = x</title></line>'
        )
    w_max = max([p[2] for p in points] + [1.0])
    for x_val, y_val, weight in points:
        r = _R_MIN + (_R_MAX - _R_MIN) * (weight / w_max) ** 0.5
        parts.append(
            f'<circle class="point" cx="{xs(x_val):.1f}" cy="{ys(y_val):.1f}" r="{r:.1f}" fill="{POINT}" '
            f'fill-opacity="0.7" stroke="#7a2c0b"><title>{fmt(x_val)}: {y_val:.2f} ({fmt(weight)})</title>'
            "</circle>"
        )
    parts.append("</svg>")
    return "\n".join(parts)


def _marker(kind: str, x: float, y: float, r: float, *, colour: str, tip: str) -> str:
    """A marker shape; outlined in white so that one drawn over a line or another marker stays seen."""
    style = f'fill="{colour}" stroke="#ffffff" stroke-width="1"'
    tip = f"<title>{escape(tip)}</title>" if tip else ""
    if kind == "circle":
        return f'<circle class="mark" cx="{x:.1f}" cy="{y:.1f}" r="{r:.1f}" {style}>{tip}</circle>'
    if kind == "square":
        box = f'x="{x - r:.1f}" y="{y - r:.1f}" width="{2 * r:.1f}" height="{2 * r:.1f}"'
        return f'<rect class="mark" {box} {style}>{tip}</rect>'
    if kind in ("plus", "cross"):
        d = r if kind == "plus" else r * 0.75
        arms = [(0, d), (d, 0)] if kind == "plus" else [(d, d), (d, -d)]
        path = "".join(f"M{x - a:.1f},{y - b:.1f}L{x + a:.1f},{y + b:.1f}" for a, b in arms)
        return f'<path class="mark" d="{path}" stroke="{colour}" stroke-width="3">{tip}</path>'
    shapes = {
        "triangle": [(0, -1.2), (1.1, 0.8), (-1.1, 0.8)],
        "down": [(0, 1.2), (1.1, -0.8), (-1.1, -0.8)],
        "diamond": [(0, -1.3), (1.3, 0), (0, 1.3), (-1.3, 0)],
    }
    pts = " ".join(f"{x + dx * r:.1f},{y + dy * r:.1f}" for dx, dy in shapes[kind])
    return f'<polygon class="mark" points="{pts}" {style}>{tip}</polygon>'


def _coinciding(series: Mapping[str, Sequence[tuple[float, float]]]) -> list[list[str]]:
    """Groups of two or more series with the same points (drawn exactly over one another)."""
    groups: dict[tuple[tuple[float, float], ...], list[str]] = {}
    for name, points in series.items():
        key = tuple((round(x, 6), round(y, 6)) for x, y in points)
        if key:
            groups.setdefault(key, []).append(name)
    return [names for names in groups.values() if len(names) > 1]


def line_chart(
    series: Mapping[str, Sequence[tuple[float, float]]],
    *,
    title: str,
    x_label: str,
    y_label: str,
    x_range: tuple[float, float] = (0.0, 1.0),
    y_range: tuple[float, float] = (0.0, 1.0),
    diagonal: bool = False,
    marks: Mapping[str, tuple[float, float]] | None = None,
    mark_label: str = "operating point",
    legend_title: str = "",
    width: int = 880,
    legend_width: int = 230,
    legend: bool = True,
) -> str:
    """One line per series, each with its own colour, marker and dash; the legend on the right names
    them. The first series is drawn widest and the later ones narrower on top, so that two series
    with the same points both stay visible, and a note under the chart names them. ``marks`` puts a
    ring on each series' single point of interest (an operating point). ``width``: of the
    ``viewBox``, about the pixels it is shown at (smaller for charts side by side); ``legend=False``
    for a single series the caption names."""
    frame = Frame(width=width, right=legend_width)
    xs = Scale(x_range[0], x_range[1], frame.x0, frame.x1)
    ys = Scale(y_range[0], y_range[1], frame.y0, frame.y1)
    parts = open_svg(title, frame.width, frame.height)
    parts += axes(frame, xs, ys, x_label=x_label, y_label=y_label)
    if diagonal:
        lo, hi = max(x_range[0], y_range[0]), min(x_range[1], y_range[1])
        parts.append(
            f'<line class="diagonal" x1="{xs(lo):.1f}" y1="{ys(lo):.1f}" x2="{xs(hi):.1f}" y2="{ys(hi):.1f}" '
            f'stroke="{MUTED}" stroke-dasharray="6 4"><title>perfect calibration: y = x</title></line>'
        )
    lx, ly = frame.x1 + 16, frame.y1 + 8
    if legend_title:
        parts.append(text(lx, ly + 4, legend_title, size=12, weight="600"))
        ly += 20
    count = len(series)
    for i, (name, points) in enumerate(series.items()):
        colour, kind, dash = COLOURS[i % len(COLOURS)], _MARKERS[i % len(_MARKERS)], _DASHES[i % len(_DASHES)]
        stroke = max(1.5, 4.5 - 3.0 * i / max(1, count - 1))
        radius = max(3.5, 7.0 - 3.5 * i / max(1, count - 1))
        dashing = f' stroke-dasharray="{dash}"' if dash else ""
        spots = [(xs(x), ys(y), x, y) for x, y in points]
        line = " ".join(f"{px:.1f},{py:.1f}" for px, py, _, _ in spots)
        parts.append(
            f'<polyline class="series" points="{line}" fill="none" stroke="{colour}" '
            f'stroke-width="{stroke:.1f}" stroke-linejoin="round"{dashing}>'
            f"<title>{escape(name)}</title></polyline>"
        )
        every = max(1, len(spots) // 40)  # markers on every point of short curves, a few on long ones
        parts += [
            _marker(kind, px, py, radius, colour=colour, tip=f"{name}: {fmt(x)}, {y:.3f}")
            for j, (px, py, x, y) in enumerate(spots)
            if j % every == 0 or j == len(spots) - 1
        ]
        if legend:
            y_row = ly + 20 * i
            parts.append(
                f'<line x1="{lx}" y1="{y_row:.1f}" x2="{lx + 30}" y2="{y_row:.1f}" stroke="{colour}" '
                f'stroke-width="{stroke:.1f}"{dashing}/>'
            )
            parts.append(_marker(kind, lx + 15, y_row, radius, colour=colour, tip=""))
            parts.append(text(lx + 38, y_row + 4, name, size=12))
    if marks:
        for i, name in enumerate(series):
            if name in marks:
                x, y = marks[name]
                colour = COLOURS[i % len(COLOURS)]
                ring = 9 + 2 * (count - 1 - i)  # shrinking along the series: two at one point show both
                parts.append(
                    f'<circle class="operating" cx="{xs(x):.1f}" cy="{ys(y):.1f}" r="{ring}" fill="none" '
                    f'stroke="{colour}" stroke-width="2.5"><title>{escape(name)} {escape(mark_label)}: '
                    f"{fmt(x)}, {y:.3f}</title></circle>"
                )
        y_row = ly + 20 * count + 6
        parts.append(
            f'<circle cx="{lx + 15}" cy="{y_row:.1f}" r="9" fill="none" stroke="{INK}" stroke-width="2.5"/>'
        )
        parts.append(text(lx + 38, y_row + 4, mark_label, size=12))
    parts.append("</svg>")
    # Named by the chart's title: charts side by side each carry their own note, and one true of a
    # single chart must not read as true of its neighbours.
    notes = [
        f"{title}: {', '.join(names[:-1])} and {names[-1]} have the same points, their lines lie on one "
        "another (told apart by width, dash and marker)."
        for names in _coinciding(series)
    ]
    return "\n".join(parts) + "".join(f'<p class="note">{escape(n)}</p>' for n in notes)
