"""The sweep's heat maps: one per grid point, from the per-token fields its bank's samples carry.

Every map shares one colour scale, so that a cell reads the same at every temperature: where the
model grows unsure as the temperature rises shows as the rows darkening from one point to the next.
A bank recorded before the banks kept ``token_entropy`` is drawn from its ``top_logprobs`` (the
top-k estimate), else from its ``token_logprobs`` (surprisal).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from html import escape
from pathlib import Path
from typing import Any

from retryctl.models._token_stats import topk_entropy
from retryctl.report._heatmap import scale_max, token_map_html
from retryctl.report._model import TokenRow, token_row

__all__ = ["MAP_QUESTIONS", "bank_token_rows", "sweep_heat_maps"]

MAP_QUESTIONS = 3
"""Questions of each bank drawn (all their samples): enough to compare the points, short enough to read."""


def _holder(sample: dict[str, Any]) -> dict[str, Any]:
    top = sample.get("top_logprobs")
    if "token_entropy" in sample or not isinstance(top, list) or not top:
        return sample
    try:
        entropy = [round(topk_entropy([(str(t), float(lp)) for t, lp in alts]), 3) for alts in top]
    except (TypeError, ValueError):
        return sample
    return {**sample, "token_entropy": entropy, "entropy_kind": f"top{min(len(a) for a in top)}"}


def bank_token_rows(path: Path, *, questions: int = MAP_QUESTIONS) -> list[TokenRow]:
    """The heat-map rows of the first ``questions`` questions of a bank, one per sample."""
    rows: list[TokenRow] = []
    with path.open(encoding="utf-8") as handle:
        for n, line in enumerate(handle):
            if n >= questions:
                break
            entry = json.loads(line)
            for i, sample in enumerate(entry.get("samples") or []):
                if isinstance(sample, dict):
                    row = token_row(f"sample {i}", _holder(sample), f"question {entry.get('id')}")
                    if row is not None:
                        rows.append(row)
    return rows


def sweep_heat_maps(points: Sequence[tuple[str, Path]]) -> str:
    """One heat map per ``(label, bank)`` grid point on one colour scale, as an HTML section."""
    per_point = [(label, bank_token_rows(path)) for label, path in points if path.exists()]
    every = [r for _, rows in per_point for r in rows]
    if not every:
        return "<h2>Per-token uncertainty</h2><p>No per-token data in these banks.</p>"
    top = scale_max(every)
    parts = [
        "<h2>Per-token uncertainty by grid point</h2>",
        f"<p>The first {MAP_QUESTIONS} questions' samples at each grid point, one colour scale for all: "
        "darker cells are tokens the model was less sure of. Hover a cell for its values.</p>",
    ]
    for label, rows in per_point:
        body = token_map_html(rows, vmax=top, heading="h4") if rows else "<p>No per-token data.</p>"
        parts.append(f'<section class="point"><h3>{escape(label)}</h3>{body}</section>')
    return "".join(parts)
