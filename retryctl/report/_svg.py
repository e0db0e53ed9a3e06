"""Small inline-SVG charts for the HTML report: bars, a heat map and a scatter.

Hand-written rather than matplotlib on purpose: the report needs four simple chart shapes, and a
few dozen lines of SVG keep ``retryctl audit --html`` free of a heavy plotting dependency (and of its
one-second import), render the same everywhere, and stay a self-contained file with no scripts.
Every chart is one ``<svg class="chart">`` with an ``aria-label`` and ``<title>`` tooltips per mark.
"""

from __future__ import annotations

from collections.abc import Sequence
from html import escape

__all__ = ["bar_chart", "heat_map", "scatter"]

_W, _H = 640, 260
_L, _R, _T, _B = 56, 16, 28, 44  # margins: room for axis labels


def _open(label: str, width: int = _W, height: int = _H) -> list[str]:
    return [
        f'<svg class="chart" xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" role="img" aria-label="{escape(label)}">',
        f'<text x="{width / 2:.0f}" y="16" text-anchor="middle" class="title">{escape(label)}</text>',
    ]


def _axes(x_label: str, y_label: str, y_max: float) -> list[str]:
    x0, y0, x1, y1 = _L, _H - _B, _W - _R, _T
    parts = [
        f'<line x1="{x0}" y1="{y0}" x2="{x1}" y2="{y0}" class="axis"/>',
        f'<line x1="{x0}" y1="{y0}" x2="{x0}" y2="{y1}" class="axis"/>',
        f'<text x="{(x0 + x1) / 2:.0f}" y="{_H - 6}" text-anchor="middle">{escape(x_label)}</text>',
        f'<text x="14" y="{(y0 + y1) / 2:.0f}" text-anchor="middle" '
        f'transform="rotate(-90 14 {(y0 + y1) / 2:.0f})">{escape(y_label)}</text>',
    ]
    for frac in (0.0, 0.5, 1.0):
        y = y0 - frac * (y0 - y1)
        parts.append(f'<text x="{x0 - 6}" y="{y + 4:.1f}" text-anchor="end">{_num(frac * y_max)}</text>')
    return parts


def _num(value: float) -> str:
    return f"{value:.0f}" if abs(value - round(value)) < 1e-9 else f"{value:.2g}"


def bar_chart(
    labels: Sequence[str], values: Sequence[float], *, title: str, x_label: str, y_label: str
) -> str:
    """Vertical bars, one per label (labels thinned out when crowded)."""
    parts = _open(title)
    y_max = max([*values, 1.0])
    parts += _axes(x_label, y_label, y_max)
    n = max(1, len(values))
    slot = (_W - _L - _R) / n
    every = max(1, -(-n // 10))  # at most about ten labels
    for i, (label, value) in enumerate(zip(labels, values, strict=True)):
        h = (value / y_max) * (_H - _T - _B)
        x = _L + i * slot + slot * 0.1
        y = _H - _B - h
        parts.append(
            f'<rect class="bar" x="{x:.1f}" y="{y:.1f}" width="{slot * 0.8:.1f}" height="{h:.1f}">'
            f"<title>{escape(label)}: {_num(value)}</title></rect>"
        )
        if i % every == 0:
            parts.append(
                f'<text x="{x + slot * 0.4:.1f}" y="{_H - _B + 14}" text-anchor="middle">'
                f"{escape(label)}</text>"
            )
    parts.append("</svg>")
    return "\n".join(parts)


def _color(frac: float) -> str:
    """White through orange to dark red, for a value scaled to [0, 1]."""
    f = min(1.0, max(0.0, frac))
    r = 255 - int(80 * f)
    g = 255 - int(215 * f)
    b = 255 - int(235 * f)
    return f"rgb({r},{g},{b})"


def heat_map(
    rows: Sequence[str],
    cols: Sequence[str],
    cells: Sequence[Sequence[float | None]],
    *,
    title: str,
    show_values: bool = True,
) -> str:
    """A grid coloured by value (``None`` cells left blank), rows and columns labelled."""
    left, top = 150, 40
    n_cols = max((len(r) for r in cells), default=0)
    cell_w = max(6.0, min(60.0, 560 / max(1, n_cols)))
    cell_h = 18 if len(rows) > 12 else 24
    width = int(left + cell_w * n_cols + 20)
    height = int(top + cell_h * len(rows) + 30)
    parts = _open(title, max(width, _W), height)
    peak = max((v for row in cells for v in row if v is not None), default=1.0) or 1.0
    for j, col in enumerate(cols[:n_cols]):
        if n_cols <= 20 or j % max(1, n_cols // 20) == 0:
            parts.append(
                f'<text x="{left + (j + 0.5) * cell_w:.1f}" y="{top - 6}" text-anchor="middle">'
                f"{escape(col)}</text>"
            )
    for i, (label, row) in enumerate(zip(rows, cells, strict=True)):
        y = top + i * cell_h
        parts.append(
            f'<text x="{left - 6}" y="{y + cell_h * 0.7:.1f}" text-anchor="end">{escape(label)}</text>'
        )
        for j, value in enumerate(row):
            if value is None:
                continue
            x = left + j * cell_w
            parts.append(
                f'<rect class="cell" x="{x:.1f}" y="{y}" width="{cell_w:.1f}" height="{cell_h}" '
                f'fill="{_color(value / peak)}"><title>{escape(label)} → '
                f"{escape(cols[j] if j < len(cols) else str(j))}: "
                f"{_num(value)}</title></rect>"
            )
            if show_values and cell_w >= 28 and value:
                parts.append(
                    f'<text x="{x + cell_w / 2:.1f}" y="{y + cell_h * 0.7:.1f}" text-anchor="middle">'
                    f"{_num(value)}</text>"
                )
    parts.append("</svg>")
    return "\n".join(parts)


def scatter(
    points: Sequence[tuple[float, float, float]],
    *,
    title: str,
    x_label: str,
    y_label: str,
    y_max: float = 1.0,
) -> str:
    """Points ``(x, y, weight)``; the radius grows with the weight (e.g. how many steps a point is)."""
    parts = _open(title)
    parts += _axes(x_label, y_label, y_max)
    x_max = max([p[0] for p in points] + [1.0])
    w_max = max([p[2] for p in points] + [1.0])
    for frac in (0.0, 0.5, 1.0):
        x = _L + frac * (_W - _L - _R)
        parts.append(f'<text x="{x:.1f}" y="{_H - _B + 14}" text-anchor="middle">{_num(frac * x_max)}</text>')
    for x_val, y_val, weight in points:
        x = _L + (x_val / x_max) * (_W - _L - _R)
        y = _H - _B - (y_val / y_max) * (_H - _T - _B)
        r = 3 + 9 * (weight / w_max) ** 0.5
        parts.append(
            f'<circle class="point" cx="{x:.1f}" cy="{y:.1f}" r="{r:.1f}">'
            f"<title>{_num(x_val)}: {y_val:.2f} ({_num(weight)})</title></circle>"
        )
    parts.append("</svg>")
    return "\n".join(parts)
