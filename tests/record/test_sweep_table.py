"""``retryctl sweep``'s table read at 80 columns: every heading word and every figure whole."""

from __future__ import annotations

import io

import pytest
from rich.console import Console

from retryctl.cli._sweep import _sweep_table
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


STAGED = {
    **ROW,
    "point": "think: T=0.3 top_p=0.9 min_p=-",
    "stages": [
        {"name": "think", "mean_tokens": 131.5, "p90_tokens": 160.0, "finish": {"length": 0.375},
         "repetition_rate": 0.125},
        {"name": "answer", "mean_tokens": 6.25, "p90_tokens": 9.0, "finish": {"stop": 1.0},
         "repetition_rate": 0.0},
    ],
}  # fmt: skip


@pytest.mark.parametrize("width", [80, 120])
def test_a_staged_point_is_followed_by_a_row_per_stage(width: int) -> None:
    out = io.StringIO()
    Console(file=out, width=width, color_system=None).print(_sweep_table([STAGED, ROW]))
    lines = out.getvalue().splitlines()
    assert "…" not in out.getvalue() and max(len(line) for line in lines) <= width
    think = next(i for i, line in enumerate(lines) if line.split()[:1] == ["think"])
    answer = next(i for i, line in enumerate(lines) if line.split()[:1] == ["answer"])
    assert think < answer
    # the stage's own length, p90, cut-off share and repeats; nothing of the sample's (accuracy, no answer)
    assert lines[think].split() == ["think", "131.5", "160.0", "0.375", "0.125"]
    assert lines[answer].split() == ["answer", "6.2", "9.0", "0.000", "0.000"]
    assert lines[think].startswith("  think")
