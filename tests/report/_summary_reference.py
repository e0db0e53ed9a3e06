"""The audit's sections as the one-pass implementation before ``StepTotals`` built them: the oracle.

Kept verbatim (but for this docstring, the entry point's name, and the per-budget stop reasons of
issue 12, changed here as in ``_totals.py``: a budget's name is kept in a reason's shape and given
as the row's ``budget``; and issue 13's ``ece`` and ``reliability`` of the accepted steps'
last confidences; and issue 27's ``unchecked``, which reads the record-level counts, not the steps,
so it is the package's own; and issue 29's names of the figures, those of ``retryctl._scores``) so
that ``test_totals.py`` can check that totalling steps in halves and
joining them gives, bit for bit, what this gives.

Sections (the keys of :func:`summarise`'s result, documented in ``docs/audit.md``):
``overview``, ``verdicts``, ``stop_reasons``, ``per_step``, ``cost``, ``black_holes``,
``threshold_hints``, ``accuracy``, ``samples_hist``, ``unchecked``.
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from typing import Any

from retryctl._answers import answers_agree
from retryctl._scores import auroc, brier, ece, reliability
from retryctl.report._model import Analysis, StepOutcome, no_cyclic_gc
from retryctl.report._unchecked import unchecked

__all__ = ["reference_summarise"]

_NUMBER = re.compile(r"\d+(?:\.\d+)?")
_QUOTED = re.compile(r"(\bbudget '[^']*')|'[^']*'")  # a budget's name is kept: one row per budget
_BUDGET = re.compile(r"\bbudget '([^']*)'")
_TOP = 10
_HINT_WIDTH = 0.05  # width of a "stalled just under the threshold" band


def _spend(step: StepOutcome, by_usd: bool) -> float:
    return step.usd if by_usd else step.samples


def reason_shape(reason: str) -> str:
    """A stop reason with its numbers and quoted names (but a budget's) blanked, so that like reasons
    count together."""
    return _NUMBER.sub("#", _QUOTED.sub(lambda m: m.group(1) or "'…'", reason))


def _budget_of(shape: str) -> str | None:
    found = _BUDGET.search(shape)
    return None if found is None else found.group(1)


def reference_summarise(analysis: Analysis) -> dict[str, Any]:
    """Every audit section of ``analysis`` as plain JSON values."""
    with no_cyclic_gc():
        return _sections(analysis)


def _sections(analysis: Analysis) -> dict[str, Any]:
    steps = list(analysis.steps.values())
    by_usd = any(s.usd > 0 for s in steps)
    return {
        "overview": _overview(analysis, steps),
        "verdicts": dict(analysis.actions.most_common()),
        "error_classes": dict(analysis.error_classes.most_common()),
        "stop_reasons": _stop_reasons(steps),
        "per_step": _per_step(steps),
        "cost": _cost(analysis, steps),
        "black_holes": _black_holes(steps, by_usd),
        "threshold_hints": _threshold_hints(steps),
        "accuracy": _accuracy(steps),
        "samples_hist": _samples_hist(steps),
        "unchecked": unchecked(analysis),
    }


def _overview(analysis: Analysis, steps: list[StepOutcome]) -> dict[str, Any]:
    outcomes = Counter(s.last_action or "summary only" for s in steps)
    return {
        "logs": list(analysis.paths),
        "records": analysis.records,
        "verdict_records": analysis.verdict_records,
        "summary_records": analysis.summary_records,
        "repair_records": analysis.repair_records,
        "undecodable_lines": list(analysis.undecodable_lines),
        "invalid_records": list(analysis.invalid_records),
        "runs": len(analysis.runs),
        "steps": len(steps),
        "step_outcomes": dict(outcomes.most_common()),
    }


def _stop_reasons(steps: list[StepOutcome]) -> list[dict[str, Any]]:
    shapes: Counter[str] = Counter()
    example: dict[str, str] = {}
    shape_of: dict[str, str] = {}  # reasons repeat: blank each distinct one once
    for s in steps:
        if s.last_action in ("stop", "ask_user"):
            reason = s.last_reason
            shape = shape_of.get(reason)
            if shape is None:
                shape = shape_of[reason] = reason_shape(reason)
            shapes[shape] += 1
            if shape not in example:
                example[shape] = reason
    return [
        {"reason": example[k], "shape": k, "budget": _budget_of(k), "steps": n}
        for k, n in shapes.most_common(_TOP)
    ]


def _per_step(steps: list[StepOutcome]) -> list[dict[str, Any]]:
    # One pass, summing in step order (as sum() over each group would): runs, accepted, samples,
    # max samples, attempts, verdicts, usd.
    groups: dict[str, list[Any]] = {}
    for s in steps:
        g = groups.get(s.step_id)
        if g is None:
            g = groups[s.step_id] = [0, 0, 0, s.samples, 0, 0, 0]
        g[0] += 1
        if s.last_action == "accept":
            g[1] += 1
        g[2] += s.samples
        g[3] = max(g[3], s.samples)
        g[4] += s.attempts
        g[5] += s.verdicts
        g[6] += s.usd
    rows: list[dict[str, Any]] = [
        {
            "step_id": step_id,
            "runs": n,
            "accepted": accepted,
            "avg_samples": samples / n,
            "max_samples": top,
            "avg_attempts": attempts / n,
            "avg_verdicts": verdicts / n,
            "usd": usd,
        }
        for step_id, (n, accepted, samples, top, attempts, verdicts, usd) in groups.items()
    ]
    rows.sort(key=lambda r: (-r["usd"], -r["avg_samples"] * r["runs"], r["step_id"]))
    return rows[:50]


def _cost(analysis: Analysis, steps: list[StepOutcome]) -> dict[str, Any]:
    targets = (
        set(analysis.target_samples)
        | set(analysis.target_usd)
        | set(analysis.target_attempts)
        | set(analysis.target_input_tokens)
        | set(analysis.target_output_tokens)
    )
    by_target: list[dict[str, Any]] = [
        {
            "target": t,
            "kind": "tool" if t in analysis.tools else ("none" if t == "(none)" else "model"),
            "attempts": analysis.target_attempts[t],
            "samples": float(analysis.target_samples[t]),
            "usd": float(analysis.target_usd[t]),
            "input_tokens": float(analysis.target_input_tokens[t]),
            "output_tokens": float(analysis.target_output_tokens[t]),
        }
        for t in targets
    ]
    by_target.sort(key=lambda r: (-r["usd"], -r["samples"], -r["attempts"], r["target"]))
    return {
        "total_samples": sum(s.samples for s in steps),
        "total_usd": sum(s.usd for s in steps),
        "total_input_tokens": sum(r["input_tokens"] for r in by_target),
        "total_output_tokens": sum(r["output_tokens"] for r in by_target),
        "by_target": by_target,
    }


def _black_holes(steps: list[StepOutcome], by_usd: bool) -> dict[str, Any]:
    """Steps among the top tenth by spend that still ended without an accepted answer."""
    unit = "usd" if by_usd else "samples"
    spends = [s.usd for s in steps] if by_usd else [s.samples for s in steps]
    total = sum(spends)
    if not steps or total <= 0:
        return {"unit": unit, "cutoff": 0.0, "steps": 0, "spent": 0.0, "share": 0.0, "top": []}
    ranked = sorted(spends, reverse=True)
    cutoff = ranked[max(0, len(ranked) // 10 - 1)]
    holes = [
        s for s, x in zip(steps, spends, strict=True) if x >= cutoff and x > 0 and s.last_action != "accept"
    ]
    holes.sort(key=lambda s: -_spend(s, by_usd))
    spent = sum(_spend(s, by_usd) for s in holes)
    return {
        "unit": unit,
        "cutoff": cutoff,
        "steps": len(holes),
        "spent": spent,
        "share": spent / total,
        "top": [
            {
                "run_id": s.run_id,
                "step_id": s.step_id,
                "spent": _spend(s, by_usd),
                "attempts": s.attempts,
                "outcome": s.last_action,
                "reason": s.last_reason,
            }
            for s in holes[:_TOP]
        ],
    }


def _threshold_hints(steps: list[StepOutcome]) -> list[dict[str, Any]]:
    """Steps that ended unaccepted with a confidence just under their accept threshold."""
    bands: dict[tuple[float, float, float], list[StepOutcome]] = defaultdict(list)
    for s in steps:
        t, c = s.threshold, s.last_confidence
        if s.last_action == "accept" or t is None or c is None or not (t - 2 * _HINT_WIDTH <= c < t):
            continue
        low = round(t - _HINT_WIDTH, 4) if c >= t - _HINT_WIDTH else round(t - 2 * _HINT_WIDTH, 4)
        bands[(t, low, round(low + _HINT_WIDTH, 4))].append(s)
    hints = []
    for (t, low, high), group in sorted(bands.items(), key=lambda kv: -len(kv[1])):
        graded = [s for s in group if s.gold is not None]
        right = sum(1 for s in graded if s.correct)
        text = (
            f"{len(group)} step{'s' if len(group) != 1 else ''} stalled at confidence "
            f"{low:.2f}–{high:.2f} under a {t:.2f} threshold"
        )
        if graded:
            text += f"; {right} of {len(graded)} with gold had the right answer"
        hints.append(
            {
                "threshold": t,
                "low": low,
                "high": high,
                "steps": len(group),
                "graded": len(graded),
                "correct": right,
                "text": text,
            }
        )
    return hints


def _accuracy(steps: list[StepOutcome]) -> dict[str, Any] | None:
    # One pass over the steps with a gold answer; the sums are taken over lists, in step order.
    memo: dict[tuple[Any, Any], bool] = {}  # answers and golds repeat across runs of one task set
    oks: list[bool] = []
    accepted: list[bool] = []
    confidences: list[float] = []
    every_confidence: list[float] = []
    samples: list[Any] = []
    usd: list[Any] = []
    by_samples: dict[float, list[int]] = {}
    for s in steps:
        gold = s.gold
        if gold is None:
            continue
        answer = s.answer
        if answer is None:
            ok = False
        else:
            known = memo.get((answer, gold))
            ok = memo[(answer, gold)] = answers_agree(answer, gold) if known is None else known
        oks.append(ok)
        every_confidence.append(float(s.last_confidence or 0.0))
        if s.last_action == "accept":
            accepted.append(ok)
            confidences.append(float(s.last_confidence or 0.0))
        x = s.samples
        samples.append(x)
        usd.append(s.usd)
        cell = by_samples.get(x)
        if cell is None:
            cell = by_samples[x] = [0, 0]
        cell[0] += 1
        cell[1] += ok
    if not oks:
        return None
    right = sum(oks)
    return {
        "graded": len(oks),
        "correct": right,
        "accepted": len(accepted),
        "accepted_right": sum(accepted),
        "accuracy": sum(accepted) / len(oks),
        "coverage": len(accepted) / len(oks),
        "accepted_precision": (sum(accepted) / len(accepted)) if accepted else None,
        "ungated_accuracy": right / len(oks),
        "ece": ece(list(zip(confidences, accepted, strict=True))),
        "brier": brier(list(zip(every_confidence, oks, strict=True))),
        "auroc": auroc(list(zip(every_confidence, oks, strict=True))),
        "reliability": [
            {"confidence": c, "share_right": a, "steps": n}
            for c, a, n in reliability(list(zip(confidences, accepted, strict=True)))
        ],
        "avg_samples": sum(samples) / len(oks),
        "usd": sum(usd),
        "by_samples": [
            {"samples": k, "steps": v[0], "ungated_accuracy": v[1] / v[0]}
            for k, v in sorted(by_samples.items())
        ],
    }


def _samples_hist(steps: list[StepOutcome]) -> list[list[float]]:
    counts = Counter(s.samples for s in steps)
    return [[k, n] for k, n in sorted(counts.items())]
