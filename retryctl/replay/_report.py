"""Benchmark reports: the per-policy summary, the per-stratum A/B split, and accuracy-vs-samples curves.

Strata are the bank's own when its questions name one (the ``stratum`` key a task file gives and
``retryctl record`` copies): the difficulty the tasks were written at. A bank without them is split by
each question's *full-bank agreement* (the most common answer's share of all the question's samples)
into bins named for what they measure, ``agree>=0.9``, ``agree 0.6-0.9`` and ``agree<0.6``: not
"easy" or "hard", words task files use for their own strata. An A/B is reported per stratum as the
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
    "NO_STRATUM",
    "STRATA",
    "CurvePoint",
    "cost_order",
    "curve_for",
    "paired_delta",
    "policy_cap",
    "policy_label",
    "relative_costs",
    "run_policies",
    "strata_basis",
    "strata_of",
    "summary_row",
]

STRATA: tuple[tuple[str, float], ...] = (("agree>=0.9", 0.9), ("agree 0.6-0.9", 0.6), ("agree<0.6", 0.0))
"""Bins of a bank without strata of its own: name and the lowest full-bank agreement each one takes,
checked in this order."""

NO_STRATUM = "(none)"
"""Where the questions without a ``stratum`` go in a bank whose other questions have one."""


def strata_basis(bank: CodedBank) -> str:
    """``"bank"`` when any question names its stratum (:func:`strata_of` then uses them), else
    ``"agreement"``."""
    return "bank" if any(q.stratum is not None for q in bank.questions) else "agreement"


def strata_of(bank: CodedBank) -> dict[str, list[int]]:
    """Question indices per stratum: the bank's own, in first-seen order, when it has them; else the
    agreement bins of :data:`STRATA` (every one present, possibly empty)."""
    if strata_basis(bank) == "bank":
        own: dict[str, list[int]] = {}
        for index, question in enumerate(bank.questions):
            own.setdefault(question.stratum or NO_STRATUM, []).append(index)
        return own
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


def policy_cap(name: str, bank: CodedBank, *, max_samples: int) -> int:
    """The most samples ``name`` can draw per question here: its own ``N`` for ``sc-N``, never more
    than ``max_samples`` nor than the bank's largest question holds."""
    spec = parse_stopping_rule(name)
    largest = max((q.n for q in bank.questions), default=0)
    cap = min(max_samples, largest)
    return min(cap, int(spec.param)) if spec.family == "sc" and spec.param is not None else cap


def policy_label(name: str, cap: int) -> str:
    """``name`` as a table shows it: ``sc-N`` says the ``N`` it really drew (``sc-3 (asked sc-40)`` on a
    bank of 3 samples), so no row claims a majority of more samples than the replay had."""
    spec = parse_stopping_rule(name)
    if spec.family == "sc" and spec.param is not None and int(spec.param) > cap:
        return f"sc-{cap} (asked {name})"
    return name


def curve_for(bank: CodedBank, name: str, *, orders: Orders, max_samples: int) -> list[CurvePoint]:
    """Replay the sweep of ``name``'s family (its knob over a fixed grid)."""
    points = []
    for swept in parse_stopping_rule(name).sweep():
        result = replay(
            bank, parse_stopping_rule(swept).build(), orders=orders, max_samples=max_samples, policy=swept
        )
        points.append(CurvePoint(swept, result.accuracy(), result.avg_samples()))
    return points


def _ratio(value: float | None, base: float | None) -> float | None:
    return None if value is None or not base else round(value / base, 4)


def relative_costs(result: ReplayResult, *, sc_max: ReplayResult, ac_beta: ReplayResult) -> dict[str, Any]:
    """A policy's cost against the two reference points of one run: SC at the cap (every sample
    drawn) and Adaptive-Consistency's Beta test. ``tokens_vs_*`` is ``None`` where the bank does not
    give token counts; ``samples_vs_*`` is always there."""
    tokens = result.avg_tokens()
    return {
        "tokens_vs_sc_max": _ratio(tokens, sc_max.avg_tokens()),
        "tokens_vs_ac_beta": _ratio(tokens, ac_beta.avg_tokens()),
        "samples_vs_sc_max": _ratio(result.avg_samples(), sc_max.avg_samples()),
        "samples_vs_ac_beta": _ratio(result.avg_samples(), ac_beta.avg_samples()),
    }


def cost_order(rows: Sequence[dict[str, Any]]) -> tuple[str, list[dict[str, Any]]]:
    """Rows cheapest first, and the unit they are sorted by: ``avg_tokens`` where every row has
    it (the unit users pay for), else ``avg_samples``. Rows that cost the same keep their order."""
    unit = "avg_tokens" if rows and all(row["avg_tokens"] is not None for row in rows) else "avg_samples"
    return unit, sorted(rows, key=lambda row: float(row[unit]))


def summary_row(
    result: ReplayResult,
    *,
    strata: dict[str, list[int]] | None = None,
    baseline: ReplayResult | None = None,
    curve: list[CurvePoint] | None = None,
    cap: int | None = None,
    references: tuple[ReplayResult, ReplayResult] | None = None,
) -> dict[str, Any]:
    """The JSON object of one policy: the contract's keys, plus ``strata`` and ``curve`` when asked.

    Accuracies are fractions (0 to 1), as every command prints them (``retryctl._scores``), though
    :meth:`ReplayResult.accuracy` is a percent; ``delta`` too. With ``cap``, the row also says the
    most samples the policy could draw (``cap``) and its honest ``label``; with ``references`` (SC at
    the cap, AC-Beta) its :func:`relative_costs`."""
    row: dict[str, Any] = {
        "policy": result.policy,
        **({} if cap is None else {"label": policy_label(result.policy, cap), "cap": cap}),
        "accuracy": round(result.accuracy() / 100, 4),
        "avg_samples": round(result.avg_samples(), 4),
        "avg_tokens": None if (tokens := result.avg_tokens()) is None else round(tokens, 2),
        # The share of the samples drawn that were cut short (not cuts per question: a fraction).
        "cut_rate": round(result.cut / drawn, 4) if (drawn := sum(result.samples)) else 0.0,
        "questions": result.questions,
        "orders": result.orders,
        "ece": None if result.ece is None else round(result.ece, 4),
        "auroc": None if result.auroc is None else round(result.auroc, 4),
    }
    if references is not None:
        row.update(relative_costs(result, sc_max=references[0], ac_beta=references[1]))
    if strata is not None:
        split: dict[str, Any] = {}
        for stratum, indices in strata.items():
            entry: dict[str, Any] = {
                "questions": len(indices),
                "accuracy": round(result.accuracy(indices) / 100, 4),
                "avg_samples": round(result.avg_samples(indices), 4),
                "avg_tokens": None if (part := result.avg_tokens(indices)) is None else round(part, 2),
            }
            if baseline is not None and baseline is not result:
                delta, se = paired_delta(result, baseline, indices)
                entry["delta_vs"] = baseline.policy
                entry["delta"] = round(delta / 100, 4)
                entry["delta_se"] = round(se / 100, 4)
            split[stratum] = entry
        row["strata"] = split
    if curve is not None:
        row["curve"] = [
            {
                "policy": p.policy,
                "accuracy": round(p.accuracy / 100, 4),
                "avg_samples": round(p.avg_samples, 4),
            }
            for p in curve
        ]
    return row
