"""``retryctl sweep``'s table read at 80 columns: every heading word and every figure whole."""

from __future__ import annotations

import io

import pytest
from rich.console import Console

from retryctl.cli._record import _sweep_table
from retryctl.record._sweep_page import SWEEP_COLUMNS, sweep_cells

ROW = {
    "point": "T=0.7 top_p=0.95 min_p=0.05",
    "majority_accuracy": 0.5,
    "default_accuracy": 0.25,
    "default_avg_samples": 5.5,
    "default_avg_tokens": 123.4,
    "mean_tokens": 140.2,
    "p90_tokens": 256,
    "finish": {"length": 0.1},
    "parse_failure_rate": 0.05,
    "repetition_rate": 0.012,
}


def _printed(width: int) -> str:
    out = io.StringIO()
    Console(file=out, width=width, color_system=None).print(_sweep_table([ROW, {**ROW, "point": "T=1"}]))
    return out.getvalue()


@pytest.mark.parametrize("width", [80, 120])
def test_every_heading_and_figure_is_printed_whole(width: int) -> None:
    text = _printed(width)
    assert "…" not in text and max(len(line) for line in text.splitlines()) <= width
    words = text.split()
    for title, _, _ in SWEEP_COLUMNS:
        assert all(word in words for word in title.split()), title
    for cell in sweep_cells(ROW)[1:]:
        assert words.count(cell) >= 2, cell
    assert all(knob in words for knob in ("T=0.7", "top_p=0.95", "min_p=0.05"))
