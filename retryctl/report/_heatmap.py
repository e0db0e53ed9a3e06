"""The per-token heat map: one row per logged candidate, one cell per token, coloured by uncertainty.

Plain HTML and inline SVG (no scripts, no external files). A cell's colour is the token's entropy in
nats (or its surprisal ``-log p`` where only logprobs were logged) on one light-to-dark scale shared
by the whole report, so that rows and steps compare; its text is the token, in black or white,
whichever contrasts more with the cell (never under WCAG AA's 4.5:1); its ``<title>`` (the hover)
gives the token's text, logprob, entropy and top-3 mass. Rows wrap every :data:`PER_LINE` tokens.
The candidate an ``accept`` returned is outlined and marked ✓. Each step (``run/step``) is its own
section, so a run of 20 questions reads as 20 short maps rather than one tall one.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from html import escape

from retryctl.report._model import TokenRow

__all__ = ["PER_LINE", "contrast", "scale_max", "text_colour", "token_colour", "token_map_html"]

PER_LINE = 32
"""Tokens per line of a row; a longer candidate wraps onto more lines."""

_CELL_W, _CELL_H, _LABEL_W, _GAP = 30, 18, 300, 6  # room for '✓ attempt 1 · embedded:SmolLM… · s0 → 42'
_CHARS = 4  # what fits in a cell at 11 px monospace
_ACCEPTED = "#196c2e"
# A light-to-dark sequential scale (the magma palette's upper part): calm tokens light, unsure dark.
_STOPS = ["#fcfdbf", "#fec287", "#fb8761", "#e55964", "#b5367a", "#832681", "#51127c", "#1d1147"]
_STYLE = (
    "section.tokmap{margin:10px 0}section.tokmap h3{font-size:14px;margin:8px 0 2px}"
    "svg.tokens text{font:11px ui-monospace,monospace}svg.tokens text.lab{font:12px system-ui,sans-serif}"
)


def _rgb(hex_colour: str) -> tuple[int, int, int]:
    h = hex_colour.lstrip("#")
    return int(h[0:2], 16), int(h[2:4], 16), int(h[4:6], 16)


def _luminance(hex_colour: str) -> float:
    """WCAG 2 relative luminance."""
    out = []
    for c in _rgb(hex_colour):
        s = c / 255.0
        out.append(s / 12.92 if s <= 0.04045 else ((s + 0.055) / 1.055) ** 2.4)
    r, g, b = out
    return 0.2126 * r + 0.7152 * g + 0.0722 * b


def contrast(a: str, b: str) -> float:
    """The WCAG 2 contrast ratio of two ``#rrggbb`` colours (1 to 21)."""
    la, lb = sorted((_luminance(a), _luminance(b)), reverse=True)
    return (la + 0.05) / (lb + 0.05)


def text_colour(fill: str) -> str:
    """Black or white, whichever contrasts more with ``fill`` (at least 4.58:1 for any colour)."""
    return "#000000" if contrast(fill, "#000000") >= contrast(fill, "#ffffff") else "#ffffff"


def token_colour(value: float, vmax: float) -> str:
    """The cell colour of ``value`` nats on a scale from 0 to ``vmax``."""
    t = min(1.0, max(0.0, value / vmax)) if vmax > 0 else 0.0
    pos = t * (len(_STOPS) - 1)
    i = min(len(_STOPS) - 2, int(pos))
    f = pos - i
    a, b = _rgb(_STOPS[i]), _rgb(_STOPS[i + 1])
    r, g, bl = (round(x + (y - x) * f) for x, y in zip(a, b, strict=True))
    return f"#{r:02x}{g:02x}{bl:02x}"


def scale_max(rows: Sequence[TokenRow]) -> float:
    """The top of the colour scale: the largest value logged, rounded up to a whole nat (half a nat
    under 2; 1 at least), so that the legend's ticks fall on round values."""
    top = max((v for r in rows for v in r.values if math.isfinite(v)), default=1.0)
    return max(1.0, math.ceil(top * 2.0) / 2.0 if top <= 2.0 else float(math.ceil(top)))


def _ticks(vmax: float) -> list[float]:
    """Round tick values from 0 to ``vmax``: no more than 7."""
    step = next(s for s in (0.25, 0.5, 1.0, 2.0, 5.0, 10.0, math.inf) if vmax / s <= 6)
    if math.isinf(step):
        return [0.0, vmax]
    n = math.floor(vmax / step + 1e-9)
    return [i * step for i in range(n + 1)]


def _shown(token: str) -> str:
    text = token.replace(" ", "·").replace("\n", "↵").replace("\t", "→")
    return text if len(text) <= _CHARS else text[: _CHARS - 1] + "…"


def _hover(row: TokenRow, i: int) -> str:
    parts = [f"token {i}"]
    if i < len(row.tokens):
        parts[0] += f" {row.tokens[i]!r}"
    if i < len(row.logprobs):
        parts.append(f"logprob {row.logprobs[i]:.3f} (p {math.exp(row.logprobs[i]):.3f})")
    if row.kind == "entropy":
        kind = f", {row.entropy_kind}" if row.entropy_kind else ""
        parts.append(f"entropy {row.values[i]:.3f} nats{kind}")
    else:
        parts.append(f"surprisal {row.values[i]:.3f} nats")
    if i < len(row.top3):
        parts.append(f"top-3 mass {row.top3[i]:.3f}")
    return " · ".join(parts)


def _row_label(row: TokenRow) -> str:
    mark = "✓ " if row.accepted else ""
    kind = "" if row.kind == "entropy" else " (−log p)"
    answer = ""
    if row.answer is not None:
        answer = " → " + (row.answer if len(row.answer) <= 8 else row.answer[:7] + "…")
    more = f" ({len(row.values)} of {row.total})" if row.total > len(row.values) else ""
    return f"{mark}{row.label}{answer}{kind}{more}"


def _map_svg(rows: Sequence[TokenRow], vmax: float, title: str) -> str:
    lines = [max(1, math.ceil(len(r.values) / PER_LINE)) for r in rows]
    width = _LABEL_W + PER_LINE * _CELL_W + 4
    height = sum(n * _CELL_H + _GAP for n in lines) + 4
    out = [
        f'<svg class="tokens" xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        # as wide as it is drawn, narrower on a narrower page (the cells scale, none is cut off)
        f'viewBox="0 0 {width} {height}" style="max-width:100%;height:auto" role="img" '
        f'aria-label="{escape(title)}">'
        f'<rect width="{width}" height="{height}" fill="#ffffff"/>'
    ]
    y = 2
    for row, n in zip(rows, lines, strict=True):
        colour = _ACCEPTED if row.accepted else "#222222"
        weight = ' font-weight="600"' if row.accepted else ""
        out.append(
            f'<text class="lab" x="4" y="{y + 13}" fill="{colour}"{weight}>{escape(_row_label(row))}</text>'
        )
        for i, value in enumerate(row.values):
            cx = _LABEL_W + (i % PER_LINE) * _CELL_W
            cy = y + (i // PER_LINE) * _CELL_H
            fill = token_colour(value, vmax)
            text = _shown(row.tokens[i]) if i < len(row.tokens) else ""
            out.append(
                f'<g class="tok"><title>{escape(_hover(row, i))}</title>'
                f'<rect class="cell" x="{cx}" y="{cy}" width="{_CELL_W - 1}" height="{_CELL_H - 1}" '
                f'fill="{fill}"/>'
                + (
                    f'<text x="{cx + 2}" y="{cy + 13}" fill="{text_colour(fill)}">{escape(text)}</text>'
                    if text
                    else ""
                )
                + "</g>"
            )
        if row.accepted:
            span = min(PER_LINE, max(1, len(row.values)))
            out.append(
                f'<rect class="accepted" x="{_LABEL_W - 1}" y="{y - 1}" width="{span * _CELL_W + 1}" '
                f'height="{n * _CELL_H + 1}" fill="none" stroke="{_ACCEPTED}" stroke-width="2"/>'
            )
        y += n * _CELL_H + _GAP
    out.append("</svg>")
    return "".join(out)


def _legend(vmax: float, kinds: set[str]) -> str:
    what = {
        frozenset({"entropy"}): "entropy (nats)",
        frozenset({"surprisal"}): "surprisal −log p of the chosen token (nats)",
    }.get(frozenset(kinds), "entropy, or surprisal −log p where marked (nats)")
    steps, sw = 40, 10
    width, height = 80 + steps * sw + 40, 46
    out = [
        f'<svg class="tokens legend" xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'role="img" aria-label="colour scale: {escape(what)}">'
        f'<rect width="{width}" height="{height}" fill="#ffffff"/>'
        f'<text class="lab" x="4" y="12" fill="#222222">{escape(what)}</text>'
    ]
    for i in range(steps):
        fill = token_colour((i + 0.5) / steps * vmax, vmax)
        out.append(f'<rect x="{80 + i * sw}" y="18" width="{sw}" height="12" fill="{fill}"/>')
    for tick in _ticks(vmax):
        x = 80 + tick / vmax * steps * sw
        out.append(
            f'<line x1="{x:.0f}" y1="30" x2="{x:.0f}" y2="34" stroke="#444444"/>'
            f'<text x="{x:.0f}" y="44" fill="#222222" text-anchor="middle">{tick:g}</text>'
        )
    out.append("</svg>")
    return "".join(out)


def token_map_html(rows: Sequence[TokenRow], *, vmax: float | None = None, heading: str = "h3") -> str:
    """The heat map of ``rows``: its legend, then one section per step (``TokenRow.group``), in the
    order first logged. ``vmax``: the top of the colour scale (default :func:`scale_max`)."""
    if not rows:
        return ""
    top = scale_max(rows) if vmax is None else vmax
    groups: dict[str, list[TokenRow]] = {}
    for r in rows:
        groups.setdefault(r.group, []).append(r)
    parts = [f"<style>{_STYLE}</style>", _legend(top, {r.kind for r in rows})]
    for group, members in groups.items():
        accepted = sum(r.accepted for r in members)
        note = f"{len(members)} candidate{'s' if len(members) != 1 else ''}" + (
            ", ✓ accepted" if accepted else ""
        )
        name = group or "logged samples"
        parts.append(
            f'<section class="tokmap"><{heading}>{escape(name)} '
            f"<small>({escape(note)})</small></{heading}>{_map_svg(members, top, name)}</section>"
        )
    return "".join(parts)
