"""From an :class:`Analysis` to the audit's sections, as one JSON-ready dict.

Sections (the keys of :func:`summarise`'s result, documented in ``docs/audit.md``):
``overview``, ``verdicts``, ``stop_reasons``, ``per_step``, ``cost``, ``black_holes``,
``threshold_hints``, ``accuracy``, ``samples_hist``, ``unchecked``.

What the sections need from the steps is gathered first (:class:`~retryctl.report._totals.StepTotals`,
one pass), so that a large log's two halves can be totalled in two processes and joined
(:func:`retryctl.report.audit_summary`); :func:`sections` builds the sections from the totals.
"""

from __future__ import annotations

from collections import Counter
from operator import itemgetter
from typing import Any

from retryctl._scores import auroc, brier, ece, figure_rows, reliability, shares
from retryctl.report._model import Analysis, no_cyclic_gc
from retryctl.report._totals import TOP, Hole, StepTotals, budget_of, reason_shape, running_total
from retryctl.report._unchecked import unchecked

__all__ = ["reason_shape", "sections", "summarise"]

_first = itemgetter(0)


def summarise(analysis: Analysis) -> dict[str, Any]:
    """Every audit section of ``analysis`` as plain JSON values."""
    with no_cyclic_gc():
        return sections(analysis, StepTotals.of(analysis.steps.values()))


def sections(analysis: Analysis, totals: StepTotals) -> dict[str, Any]:
    """The sections, from ``analysis``'s record-level counts and ``totals``, the totals of its steps."""
    return {
        "overview": _overview(analysis, totals),
        "verdicts": dict(analysis.actions.most_common()),
        "error_classes": dict(analysis.error_classes.most_common()),
        "stop_reasons": [
            {"reason": totals.shapes[k][1], "shape": k, "budget": budget_of(k), "steps": n}
            for k, n in Counter({k: row[0] for k, row in totals.shapes.items()}).most_common(TOP)
        ],
        "per_step": _per_step(totals),
        "cost": _cost(analysis, totals),
        "black_holes": _black_holes(totals),
        "threshold_hints": _threshold_hints(totals),
        "accuracy": _accuracy(totals),
        "samples_hist": [[k, n] for k, n in sorted(totals.samples_hist, key=_first)],
        "unchecked": unchecked(analysis),
    }


def _overview(analysis: Analysis, totals: StepTotals) -> dict[str, Any]:
    return {
        "logs": list(analysis.paths),
        "records": analysis.records,
        "verdict_records": analysis.verdict_records,
        "summary_records": analysis.summary_records,
        "repair_records": analysis.repair_records,
        "undecodable_lines": list(analysis.undecodable_lines),
        "invalid_records": list(analysis.invalid_records),
        "runs": len(analysis.runs),
        "steps": totals.steps,
        "step_outcomes": dict(Counter(totals.outcomes).most_common()),
    }


def _per_step(totals: StepTotals) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = [
        {
            "step_id": step_id,
            "runs": n,
            "accepted": accepted,
            "avg_samples": running_total(samples) / n,
            "max_samples": top,
            "avg_attempts": running_total(attempts) / n,
            "avg_verdicts": verdicts / n,
            "usd": running_total(usd),
        }
        for step_id, (n, accepted, samples, top, attempts, verdicts, usd) in totals.groups.items()
    ]
    rows.sort(key=lambda r: (-r["usd"], -r["avg_samples"] * r["runs"], r["step_id"]))
    return rows[:50]


def _cost(analysis: Analysis, totals: StepTotals) -> dict[str, Any]:
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
        "total_samples": sum(totals.samples),
        "total_usd": sum(totals.usd),
        # What the verdicts charged, each call once (a step's tokens are not kept: nothing reads them).
        "total_input_tokens": sum(r["input_tokens"] for r in by_target),
        "total_output_tokens": sum(r["output_tokens"] for r in by_target),
        "by_target": by_target,
    }


def _black_holes(totals: StepTotals) -> dict[str, Any]:
    """Steps among the top tenth by spend that still ended without an accepted answer."""
    by_usd = totals.by_usd
    unit = "usd" if by_usd else "samples"
    spends = totals.usd if by_usd else totals.samples
    whole = sum(spends)
    if not spends or whole <= 0:
        return {"unit": unit, "cutoff": 0.0, "steps": 0, "spent": 0.0, "share": 0.0, "top": []}
    ranked = sorted(spends, reverse=True)
    cutoff = ranked[max(0, len(ranked) // 10 - 1)]
    holes = [x for x, ok in zip(spends, totals.accepted, strict=True) if x >= cutoff and x > 0 and not ok]
    holes.sort(key=lambda x: -x)  # the order the steps rank in, which the float sum follows
    spent = sum(holes)
    top: list[Hole] = [h for h in (totals.top_usd if by_usd else totals.top_samples) if h.spent >= cutoff]
    return {
        "unit": unit,
        "cutoff": cutoff,
        "steps": len(holes),
        "spent": spent,
        "share": spent / whole,
        "top": [
            {
                "run_id": h.run_id,
                "step_id": h.step_id,
                "spent": h.spent,
                "attempts": h.attempts,
                "outcome": h.outcome,
                "reason": h.reason,
            }
            for h in top
        ],
    }


def _threshold_hints(totals: StepTotals) -> list[dict[str, Any]]:
    """Steps that ended unaccepted with a confidence just under their accept threshold."""
    hints = []
    for t, low, high, steps, graded, right in sorted(totals.bands, key=lambda b: -b[3]):
        text = (
            f"{steps} step{'s' if steps != 1 else ''} stalled at confidence "
            f"{low:.2f}–{high:.2f} under a {t:.2f} threshold"
        )
        if graded:
            text += f"; {right} of {graded} with gold had the right answer"
        hints.append(
            {
                "threshold": t,
                "low": low,
                "high": high,
                "steps": steps,
                "graded": graded,
                "correct": right,
                "text": text,
            }
        )
    return hints


def _accuracy(totals: StepTotals) -> dict[str, Any] | None:
    # The figures of retryctl._scores, by its names (one definition each): `accuracy` is accepted and
    # right over the steps with gold, as in `batch` and `eval`; right whether accepted or not is
    # `ungated_accuracy`.
    oks, accepted = totals.graded, totals.accepted_graded
    if not oks:
        return None
    reliable = list(zip(totals.accepted_confidence, accepted, strict=True))
    everything = list(zip(totals.graded_confidence, oks, strict=True))
    right = sum(oks)
    return {
        "graded": len(oks),
        "correct": right,
        "accepted": len(accepted),
        "accepted_right": sum(accepted),
        **shares(n=len(oks), accepted=len(accepted), accepted_right=sum(accepted), right=right),
        # How far an accepted step's confidence is its chance of being right (retryctl.evals).
        "ece": ece(reliable),
        # Of every graded step's last confidence, accepted or not, as `batch` and `eval` (retryctl._scores).
        "brier": brier(everything),
        "auroc": auroc(everything),
        "reliability": [{"confidence": c, "share_right": a, "steps": n} for c, a, n in reliability(reliable)],
        "avg_samples": sum(totals.graded_samples) / len(oks),
        "usd": sum(totals.graded_usd),
        "by_samples": [
            {"samples": k, "steps": n, "ungated_accuracy": r / n}
            for k, n, r in sorted(totals.by_samples, key=_first)
        ],
    }


def figures_line(acc: dict[str, Any]) -> str:
    """The ``accuracy`` section's figures in one line, by the labels of :data:`retryctl._scores.LABELS`
    and as its tables print them (fractions with three decimals, ``-`` when undefined)."""
    return ", ".join(f"{label} {value}" for label, value in figure_rows(acc)) + (
        f" (accepted and right: {acc['accepted_right']} of {acc['graded']}; "
        f"right, accepted or not: {acc['correct']} of {acc['graded']})"
    )
