"""Benchmark reports: the per-policy summary, the per-stratum A/B split, and accuracy-vs-samples curves.

Strata split questions by their *full-bank leader share* (the most common answer's share of all the
question's samples): easy >= 0.9, medium >= 0.6, hard below. An A/B is reported per stratum as the
accuracy difference against the first policy with a paired standard error over questions (each question
contributes its accuracy over the orders), so "no loss beyond noise" can be read off directly.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from retryctl.controller.stopping import parse_stopping_rule
from retryctl.replay._bank import CodedBank
from retryctl.replay._replay import Orders, ReplayResult, replay

__all__ = [
    "STRATA",
    "CurvePoint",
    "curve_for",
    "paired_delta",
    "run_policies",
    "strata_of",
    "summary_row",
]

STRATA: tuple[tuple[str, float], ...] = (("easy", 0.9), ("medium", 0.6), ("hard", 0.0))
"""Stratum names and the lowest full-bank leader share each one takes, checked in this order."""


def strata_of(bank: CodedBank) -> dict[str, list[int]]:
    """Question indices per stratum (every stratum present, possibly empty)."""
    out: dict[str, list[int]] = {name: [] for name, _ in STRATA}
    for index, question in enumerate(bank.questions):
        share = question.leader_share
        for name, lowest in STRATA:
            if share >= lowest:
                out[name].append(index)
                break
    return out


def paired_delta(a: ReplayResult, b: ReplayResult, indices: Sequence[int]) -> tuple[float, float]:
    """Accuracy of ``a`` minus ``b`` in points over ``indices``, and its paired standard error."""
    if not indices:
        return 0.0, 0.0
    diffs = [100.0 * (a.correct[i] / a.orders - b.correct[i] / b.orders) for i in indices]
    mean = sum(diffs) / len(diffs)
    if len(diffs) < 2:
        return mean, 0.0
    var = sum((d - mean) ** 2 for d in diffs) / (len(diffs) - 1)
    return mean, math.sqrt(var / len(diffs))


def run_policies(
    bank: CodedBank, names: Sequence[str], *, orders: Orders, max_samples: int
) -> list[ReplayResult]:
    """Replay each named policy (names already validated by :func:`parse_stopping_rule`)."""
    return [
        replay(bank, parse_stopping_rule(name).build(), orders=orders, max_samples=max_samples, policy=name)
        for name in names
    ]


@dataclass(frozen=True)
class CurvePoint:
    """One point of an accuracy-vs-samples curve."""

    policy: str
    """The swept policy's name, e.g. ``ac-beta:0.99``."""
    accuracy: float
    """Percent correct."""
    avg_samples: float
    """Mean samples per question and order."""


def curve_for(bank: CodedBank, name: str, *, orders: Orders, max_samples: int) -> list[CurvePoint]:
    """Replay the sweep of ``name``'s family (its knob over a fixed grid)."""
    points = []
    for swept in parse_stopping_rule(name).sweep():
        result = replay(
            bank, parse_stopping_rule(swept).build(), orders=orders, max_samples=max_samples, policy=swept
        )
        points.append(CurvePoint(swept, result.accuracy(), result.avg_samples()))
    return points


def summary_row(
    result: ReplayResult,
    *,
    strata: dict[str, list[int]] | None = None,
    baseline: ReplayResult | None = None,
    curve: list[CurvePoint] | None = None,
) -> dict[str, Any]:
    """The JSON object of one policy: the contract's keys, plus ``strata`` and ``curve`` when asked."""
    row: dict[str, Any] = {
        "policy": result.policy,
        "accuracy": round(result.accuracy(), 4),
        "avg_samples": round(result.avg_samples(), 4),
        "avg_tokens": None if (tokens := result.avg_tokens()) is None else round(tokens, 2),
        "cut_rate": round(result.cut / (result.orders * result.questions), 4) if result.questions else 0.0,
        "questions": result.questions,
        "orders": result.orders,
        "ece": None if result.ece is None else round(result.ece, 4),
        "auroc": None if result.auroc is None else round(result.auroc, 4),
    }
    if strata is not None:
        split: dict[str, Any] = {}
        for stratum, indices in strata.items():
            entry: dict[str, Any] = {
                "questions": len(indices),
                "accuracy": round(result.accuracy(indices), 4),
                "avg_samples": round(result.avg_samples(indices), 4),
                "avg_tokens": None if (part := result.avg_tokens(indices)) is None else round(part, 2),
            }
            if baseline is not None and baseline is not result:
                delta, se = paired_delta(result, baseline, indices)
                entry["delta_vs"] = baseline.policy
                entry["delta"] = round(delta, 4)
                entry["delta_se"] = round(se, 4)
            split[stratum] = entry
        row["strata"] = split
    if curve is not None:
        row["curve"] = [
            {"policy": p.policy, "accuracy": round(p.accuracy, 4), "avg_samples": round(p.avg_samples, 4)}
            for p in curve
        ]
    return row
