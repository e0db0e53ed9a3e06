"""Sweep the sampling knobs: one recorded bank per grid point, and the figures that tell them apart.

Per point: accuracy of the plain majority of all K samples (``majority_accuracy``, K as ``k``) and
of the default stopping policy (replayed from the bank as ``retryctl bench`` does), the samples and
tokens the default spends, mean and p90 sample length in tokens, the finish-reason mix (stopped, cut
off at ``max_tokens``), the share of samples with no answer to extract (parse failures) and the
share that repeat themselves. Every share is a fraction from 0 to 1 (accuracies included, as every
command prints them: ``retryctl._scores``), rounded to four places here and shown with three.
"""

from __future__ import annotations

import itertools
import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from retryctl.banks import BankQuestion, load_bank
from retryctl.controller.stopping import FixedSamples, default_stopping_rule
from retryctl.record._sweep_page import render_sweep_html
from retryctl.replay import code_bank, make_orders, replay

__all__ = ["REPEAT_NGRAM", "GridPoint", "grid", "point_figures", "render_sweep_html", "repetitive"]

REPEAT_NGRAM = (4, 3)
"""A sample *repeats itself* when some run of 4 words occurs 3 or more times in it: the loop a small
model falls into at a high temperature or a low ``min_p`` (one repeated phrase is not one)."""


@dataclass(frozen=True)
class GridPoint:
    """One combination of the swept knobs (``None``: the backend's default)."""

    temperature: float
    top_p: float | None
    min_p: float | None

    @property
    def label(self) -> str:
        """``T=0.7 top_p=0.9 min_p=-`` as the table prints it."""
        return f"T={self.temperature:g} top_p={_knob(self.top_p)} min_p={_knob(self.min_p)}"

    @property
    def heading(self) -> str:
        """``temperature 0.7, top_p 0.9, min_p unset``: the label in words, for a page's headings."""
        knobs = (("top_p", self.top_p), ("min_p", self.min_p))
        rest = ", ".join(f"{k} {v:g}" if v is not None else f"{k} unset" for k, v in knobs)
        return f"temperature {self.temperature:g}, {rest}"

    @property
    def file_name(self) -> str:
        """The bank's file name in the sweep's directory."""
        return f"bank-t{self.temperature:g}-p{_knob(self.top_p)}-m{_knob(self.min_p)}.jsonl"


def _knob(value: float | None) -> str:
    return "-" if value is None else f"{value:g}"


def grid(
    temperatures: Sequence[float], top_ps: Sequence[float | None], min_ps: Sequence[float | None]
) -> list[GridPoint]:
    """Every combination, temperature outermost (the order the table lists them in)."""
    return [GridPoint(t, p, m) for t, p, m in itertools.product(temperatures, top_ps, min_ps)]


def repetitive(text: str) -> bool:
    """Whether ``text`` repeats itself (:data:`REPEAT_NGRAM`)."""
    size, times = REPEAT_NGRAM
    words = text.split()
    grams = Counter(tuple(words[i : i + size]) for i in range(len(words) - size + 1))
    return any(count >= times for count in grams.values())


def _p90(values: list[int]) -> float:
    """The 90th percentile, nearest rank (a value that occurred)."""
    ordered = sorted(values)
    return float(ordered[max(0, math.ceil(0.9 * len(ordered)) - 1)]) if ordered else 0.0


def _sample_figures(questions: list[BankQuestion]) -> dict[str, Any]:
    samples = [s for q in questions for s in q.samples]
    lengths = [s.token_count or 0 for s in samples]
    finishes = Counter(s.finish_reason or "unknown" for s in samples)
    total = len(samples)
    return {
        "samples": total,
        "mean_tokens": round(sum(lengths) / total, 2) if total else 0.0,
        "p90_tokens": _p90(lengths),
        "finish": {reason: round(count / total, 4) for reason, count in sorted(finishes.items())},
        "parse_failure_rate": round(sum(s.answer is None for s in samples) / total, 4) if total else 0.0,
        "repetition_rate": round(sum(repetitive(s.text) for s in samples) / total, 4) if total else 0.0,
    }


def point_figures(point: GridPoint, bank: Path, *, orders: int = 10, seed: int = 0) -> dict[str, Any]:
    """The figures of one grid point's bank (see the module's docstring)."""
    coded = code_bank(bank)
    cap = min(q.n for q in coded.questions)
    replay_orders = make_orders(coded, orders=orders, seed=seed)
    majority = replay(coded, FixedSamples(n=cap), orders=replay_orders, max_samples=cap)
    default = replay(coded, default_stopping_rule(), orders=replay_orders, max_samples=cap)
    figures: dict[str, Any] = {
        "point": point.label,
        "temperature": point.temperature,
        "top_p": point.top_p,
        "min_p": point.min_p,
        "bank": str(bank),
        "questions": len(coded.questions),
        "k": cap,
        # ReplayResult.accuracy() is a percent; the commands' figures are fractions.
        "majority_accuracy": round(majority.accuracy() / 100, 4),
        "default_accuracy": round(default.accuracy() / 100, 4),
        "default_avg_samples": round(default.avg_samples(), 2),
        "default_avg_tokens": None if (t := default.avg_tokens()) is None else round(t, 1),
    }
    figures.update(_sample_figures(load_bank(bank)))
    return figures
