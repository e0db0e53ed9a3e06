"""Sweep the sampling knobs: one recorded bank per grid point, and the figures that tell them apart.

Per point: accuracy of the plain majority of all K samples (``majority_accuracy``, K as ``k``) and
of the default stopping policy (replayed from the bank as ``retryctl bench`` does), the samples and
tokens the default spends, mean and p90 sample length in tokens, the finish-reason mix (stopped, cut
off at ``max_tokens``), the share of samples with no answer to extract (parse failures) and the
share that repeat themselves. Every share is a fraction from 0 to 1 (accuracies included, as every
command prints them: ``retryctl._scores``), rounded to four places here and shown with three.

Where the samples ran in stages, each point's figures also hold ``stages``: per stage, in the order
they ran, its mean and p90 length in tokens, its finish-reason mix (``length``: cut off at the stage's
own cap) and the share of its text that repeats itself. A point of a sweep of one stage's knobs
names that stage (``stage``); the other stages are held as given.
"""

from __future__ import annotations

import itertools
import math
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from retryctl.banks import BankQuestion, RecordedSample, load_bank
from retryctl.controller.stopping import FixedSamples, default_stopping_rule
from retryctl.models import Stage
from retryctl.record._sweep_page import render_sweep_html
from retryctl.replay import code_bank, make_orders, replay

__all__ = [
    "REPEAT_NGRAM",
    "GridPoint",
    "grid",
    "point_figures",
    "render_sweep_html",
    "repetitive",
    "stage_figures",
    "sweep_conflict",
    "swept_stages",
]

REPEAT_NGRAM = (4, 3)
"""A sample *repeats itself* when some run of 4 words occurs 3 or more times in it: the loop a small
model falls into at a high temperature or a low ``min_p`` (one repeated phrase is not one)."""


@dataclass(frozen=True)
class GridPoint:
    """One combination of the swept knobs (``None``: the backend's default, or the swept stage's own)."""

    temperature: float
    top_p: float | None
    min_p: float | None
    stage: str | None = None
    """The stage whose knobs these are (``--sweep-stage``); ``None``: the draw's own."""

    @property
    def label(self) -> str:
        """``T=0.7 top_p=0.9 min_p=-`` as the table prints it (``think: T=0.3 ...`` for a stage's)."""
        knobs = f"T={self.temperature:g} top_p={_knob(self.top_p)} min_p={_knob(self.min_p)}"
        return knobs if self.stage is None else f"{self.stage}: {knobs}"

    @property
    def heading(self) -> str:
        """``temperature 0.7, top_p 0.9, min_p unset``: the label in words, for a page's headings."""
        knobs = (("top_p", self.top_p), ("min_p", self.min_p))
        rest = ", ".join(f"{k} {v:g}" if v is not None else f"{k} unset" for k, v in knobs)
        words = f"temperature {self.temperature:g}, {rest}"
        return words if self.stage is None else f"{self.stage} stage: {words}"

    @property
    def file_name(self) -> str:
        """The bank's file name in the sweep's directory."""
        stage = "" if self.stage is None else f"{self.stage}-"
        return f"bank-{stage}t{self.temperature:g}-p{_knob(self.top_p)}-m{_knob(self.min_p)}.jsonl"


def _knob(value: float | None) -> str:
    return "-" if value is None else f"{value:g}"


def grid(
    temperatures: Sequence[float],
    top_ps: Sequence[float | None],
    min_ps: Sequence[float | None],
    *,
    stage: str | None = None,
) -> list[GridPoint]:
    """Every combination, temperature outermost (the order the table lists them in), of ``stage``'s
    knobs when one is named."""
    points = itertools.product(temperatures, top_ps, min_ps)
    return [GridPoint(t, p, m, stage) for t, p, m in points]


def swept_stages(stages: Sequence[Stage], point: GridPoint) -> tuple[Stage, ...]:
    """``stages`` with the swept one's temperature, top-p and min-p set to the point's; the rest held."""
    return tuple(
        replace(s, temperature=point.temperature, top_p=point.top_p, min_p=point.min_p)
        if s.name == point.stage
        else s
        for s in stages
    )


_FLAGS = (("temperature", "--temperature"), ("top_p", "--top-p"), ("min_p", "--min-p"))


def sweep_conflict(
    stages: Sequence[Stage], swept: str | None, given: Mapping[str, Sequence[float | None]]
) -> str | None:
    """Why a sweep's grid would not do what it says (``None``: it would), as one line naming the
    flag and the stages. ``given`` holds each knob's values as given on the command line (a knob left
    out is absent; ``None`` in a list: ``-``).

    Unswept stages: where every stage sets a knob itself, the draw's value reaches none of them, so
    two values of it would record the same samples under two labels. One stage swept: a knob that
    stage sets itself would be silently replaced by the grid's values."""
    for knob, flag in _FLAGS:
        values = [v for v in given.get(knob, ()) if v is not None]
        # Any value given (one, or '-' beside a number) reaches no stage that sets its own: the
        # points would be labelled with settings their samples were not drawn at.
        if swept is None and stages and values:
            own = [f"{s.name} {knob}={getattr(s, knob):g}" for s in stages if getattr(s, knob) is not None]
            if len(own) == len(stages):
                return (
                    f"{flag}: every stage sets its own {knob} ({', '.join(own)}), so each point would draw "
                    f"the same samples: sweep one stage's with --sweep-stage NAME, or leave {knob} out "
                    "of a --stage"
                )
        held = next((s for s in stages if s.name == swept), None)
        if held is not None and values and getattr(held, knob) is not None:
            return (
                f"--sweep-stage {swept}: the stage sets {knob}={getattr(held, knob):g} itself, which {flag} "
                f"would replace: leave {knob} out of --stage {swept} to sweep it, or leave {flag} out to "
                "keep it"
            )
    return None


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


def _share(count: int, total: int) -> float:
    return round(count / total, 4) if total else 0.0


def _length_figures(lengths: list[int], finishes: list[str | None], texts: list[str]) -> dict[str, Any]:
    """Mean and p90 length, the finish-reason mix and the share that repeats itself."""
    total = len(lengths)
    mix = Counter(reason or "unknown" for reason in finishes)
    return {
        "mean_tokens": round(sum(lengths) / total, 2) if total else 0.0,
        "p90_tokens": _p90(lengths),
        "finish": {reason: _share(count, total) for reason, count in sorted(mix.items())},
        "repetition_rate": _share(sum(repetitive(t) for t in texts), total),
    }


def stage_figures(samples: Sequence[RecordedSample]) -> list[dict[str, Any]]:
    """Per stage, in the order the samples ran them: its :func:`_length_figures` (lengths in its own
    tokens, ``finish["length"]`` the share cut off at its own cap), how many samples ran it and the
    mean prompt tokens its requests re-evaluated (``None`` where the backend did not say)."""
    names: dict[str, None] = {}
    for sample in samples:
        names.update(dict.fromkeys(stage.name for stage in sample.stages))
    out: list[dict[str, Any]] = []
    for name in names:
        lengths: list[int] = []
        finishes: list[str | None] = []
        texts: list[str] = []
        prompts: list[int] = []
        for sample in samples:
            parts = sample.stage_texts()
            for i, stage in enumerate(sample.stages):
                if stage.name == name:
                    lengths.append(stage.tokens)
                    finishes.append(stage.finish_reason)
                    texts.append("" if parts is None else parts[i])
                    prompts += [] if stage.prompt_tokens is None else [stage.prompt_tokens]
        figures = {"name": name, "samples": len(lengths), **_length_figures(lengths, finishes, texts)}
        figures["mean_prompt_tokens"] = round(sum(prompts) / len(prompts), 2) if prompts else None
        out.append(figures)
    return out


def _sample_figures(questions: list[BankQuestion]) -> dict[str, Any]:
    samples = [s for q in questions for s in q.samples]
    total = len(samples)
    lengths = [s.token_count or 0 for s in samples]
    figures = _length_figures(lengths, [s.finish_reason for s in samples], [s.text for s in samples])
    figures = {"samples": total, **figures}
    figures["parse_failure_rate"] = _share(sum(s.answer is None for s in samples), total)
    stages = stage_figures(samples)
    return figures | ({"stages": stages} if stages else {})


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
        "stage": point.stage,
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
