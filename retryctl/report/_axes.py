"""What every chart of the HTML reports shares: a padded plot area, linear scales with round ticks,
axis titles, a legend, and text colours that keep WCAG AA contrast on whatever they sit on.

Each text element gets its ``fill`` as an attribute (never from a style sheet, which would override
it), so that what a test reads from the SVG is what a browser paints.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from html import escape

__all__ = ["INK", "MUTED", "PAD", "Frame", "Scale", "axes", "fmt", "open_svg", "text", "text_on"]

INK = "#222222"
"""Titles and axis titles (15.9:1 on white)."""
MUTED = "#4d4d4d"
"""Tick labels and notes inside a chart (8.5:1 on white)."""
GRID = "#e3e3e3"
FRAME = "#767676"
PAD = 12
"""Pixels between the frame and the data: a point at 0 or 1 is drawn inside the frame, not on it."""


def fmt(value: float) -> str:
    """A tick or tooltip value: whole numbers without decimals, others with at most three digits."""
    if abs(value - round(value)) < 1e-9:
        return f"{round(value):d}"
    return f"{value:.3g}"


def nice_ticks(lo: float, hi: float, count: int = 5, *, whole: bool = False) -> list[float]:
    """About ``count`` round values (1, 2 or 5 times a power of ten apart) covering ``[lo, hi]``;
    ``whole``: at least 1 apart (counts of steps have no half-steps)."""
    if hi <= lo:
        hi = lo + 1.0
    raw = max((hi - lo) / max(1, count), 1.0 if whole else 0.0)
    power = 10 ** math.floor(math.log10(raw))
    step = next(m * power for m in (1, 2, 2.5, 5, 10) if m * power >= raw - 1e-12)
    first = math.floor(lo / step + 1e-9) * step
    ticks, k = [], 0
    while first + k * step <= hi + step * 1e-6:
        ticks.append(round(first + k * step, 10))
        k += 1
    if ticks[-1] < hi - 1e-9:
        ticks.append(round(first + k * step, 10))
    return ticks


@dataclass(frozen=True)
class Frame:
    """The plot area inside an SVG of ``width`` × ``height``: margins left, right, top, bottom."""

    width: int = 880
    height: int = 380
    left: int = 72
    right: int = 24
    top: int = 40
    bottom: int = 56

    @property
    def x0(self) -> float:
        """Left edge of the plot area."""
        return float(self.left)

    @property
    def x1(self) -> float:
        """Right edge of the plot area."""
        return float(self.width - self.right)

    @property
    def y0(self) -> float:
        """Bottom edge of the plot area."""
        return float(self.height - self.bottom)

    @property
    def y1(self) -> float:
        """Top edge of the plot area."""
        return float(self.top)


@dataclass(frozen=True)
class Scale:
    """A linear map of ``[lo, hi]`` onto the pixels ``[start, end]`` (``end < start`` for y), inset by
    :data:`PAD` at both ends."""

    lo: float
    hi: float
    start: float
    end: float

    def __call__(self, value: float) -> float:
        """The pixel of ``value``."""
        span = self.hi - self.lo or 1.0
        sign = 1.0 if self.end >= self.start else -1.0
        a, b = self.start + sign * PAD, self.end - sign * PAD
        return a + (value - self.lo) / span * (b - a)


def open_svg(label: str, width: int, height: int) -> list[str]:
    """The opening tag (a responsive ``viewBox``, sized by the page's CSS) and the chart's title."""
    return [
        f'<svg class="chart" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} {height}" '
        f'width="{width}" height="{height}" role="img" aria-label="{escape(label)}">',
        f'<rect x="0" y="0" width="{width}" height="{height}" fill="#ffffff"/>',
        text(width / 2, 22, label, anchor="middle", cls="title", fill=INK, size=15, weight="600"),
    ]


def text(
    x: float,
    y: float,
    body: str,
    *,
    anchor: str = "start",
    cls: str = "",
    fill: str = INK,
    size: int = 13,
    weight: str = "",
    extra: str = "",
) -> str:
    """One ``<text>`` with its fill given as an attribute."""
    attrs = f' class="{cls}"' if cls else ""
    attrs += f' font-weight="{weight}"' if weight else ""
    attrs += f" {extra}" if extra else ""
    return (
        f'<text x="{x:.1f}" y="{y:.1f}" text-anchor="{anchor}" font-size="{size}" fill="{fill}"{attrs}>'
        f"{escape(body)}</text>"
    )


def axes(
    frame: Frame,
    xs: Scale,
    ys: Scale,
    *,
    x_label: str,
    y_label: str,
    x_ticks: Sequence[tuple[float, str]] | None = None,
    whole: bool = False,
) -> list[str]:
    """The frame, light grid lines at the y ticks, tick marks and their values on both axes, and the
    two axis titles. ``x_ticks`` given as (value, label) for categories; otherwise round values
    (``whole``: y ticks at whole numbers only)."""
    f = frame
    xt = x_ticks if x_ticks is not None else [(v, fmt(v)) for v in nice_ticks(xs.lo, xs.hi)]
    yt = nice_ticks(ys.lo, ys.hi, whole=whole)
    parts = [
        f'<rect x="{f.x0}" y="{f.y1}" width="{f.x1 - f.x0}" height="{f.y0 - f.y1}" fill="#ffffff" '
        f'stroke="{FRAME}"/>'
    ]
    for value in yt:
        y = ys(value)
        parts.append(f'<line x1="{f.x0}" y1="{y:.1f}" x2="{f.x1}" y2="{y:.1f}" stroke="{GRID}"/>')
        parts.append(f'<line x1="{f.x0 - 5}" y1="{y:.1f}" x2="{f.x0}" y2="{y:.1f}" stroke="{FRAME}"/>')
        parts.append(text(f.x0 - 8, y + 4, fmt(value), anchor="end", cls="tick y", fill=MUTED, size=12))
    for value, label in xt:
        x = xs(value)
        parts.append(f'<line x1="{x:.1f}" y1="{f.y0}" x2="{x:.1f}" y2="{f.y0 + 5}" stroke="{FRAME}"/>')
        parts.append(text(x, f.y0 + 19, label, anchor="middle", cls="tick x", fill=MUTED, size=12))
    mid_y = (f.y0 + f.y1) / 2
    parts.append(text((f.x0 + f.x1) / 2, f.height - 10, x_label, anchor="middle", cls="axis-title"))
    parts.append(
        text(
            18,
            mid_y,
            y_label,
            anchor="middle",
            cls="axis-title",
            extra=f'transform="rotate(-90 18 {mid_y:.1f})"',
        )
    )
    return parts


def _luminance(colour: str) -> float:
    """WCAG 2.x relative luminance of ``#rrggbb``."""
    channels = [int(colour[i : i + 2], 16) / 255 for i in (1, 3, 5)]
    lin = [c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4 for c in channels]
    return 0.2126 * lin[0] + 0.7152 * lin[1] + 0.0722 * lin[2]


def text_on(background: str) -> str:
    """Black or white, whichever contrasts more with ``background`` (``#rrggbb``): at least 4.58:1
    for any background, so a label on a dark cell is white."""
    lum = _luminance(background)
    return "#000000" if (lum + 0.05) / 0.05 >= 1.05 / (lum + 0.05) else "#ffffff"
