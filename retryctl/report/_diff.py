"""``--diff A B``: two runs, or two logs (e.g. two policies over one task set), side by side.

Each side is reduced to the same figures (verdict mix, steps, average samples and attempts per step,
cost, accept rate, accuracy and ungated accuracy when gold answers are logged) and the difference
``B - A`` is given for every number.
"""

from __future__ import annotations

from typing import Any

from retryctl.report._model import Analysis, StepOutcome

__all__ = ["diff_sides", "side_figures"]


def side_figures(analysis: Analysis, *, run_id: str | None = None) -> dict[str, Any]:
    """The figures compared for one side: the whole analysis, or only ``run_id``'s steps."""
    steps: list[StepOutcome] = [s for s in analysis.steps.values() if run_id is None or s.run_id == run_id]
    verdicts: dict[str, int] = {}
    for s in steps:
        for action in s.actions:
            verdicts[action] = verdicts.get(action, 0) + 1
    n = len(steps)
    graded = [s for s in steps if s.gold is not None]
    return {
        "steps": n,
        "verdicts": dict(sorted(verdicts.items())),
        "accept_rate": (sum(1 for s in steps if s.accepted) / n) if n else None,
        "avg_samples": (sum(s.samples for s in steps) / n) if n else None,
        "avg_attempts": (sum(s.attempts for s in steps) / n) if n else None,
        "total_samples": sum(s.samples for s in steps),
        "usd": sum(s.usd for s in steps),
        # By retryctl._scores's names: right whether accepted or not is `ungated_accuracy`; `accuracy`
        # counts only what was accepted.
        "accuracy": (sum(1 for s in graded if s.correct and s.accepted) / len(graded)) if graded else None,
        "ungated_accuracy": (sum(1 for s in graded if s.correct) / len(graded)) if graded else None,
        "graded": len(graded),
    }


def _delta(a: Any, b: Any) -> Any:
    if isinstance(a, dict) and isinstance(b, dict):
        return {k: _delta(a.get(k, 0), b.get(k, 0)) for k in sorted(set(a) | set(b))}
    if isinstance(a, int | float) and isinstance(b, int | float):
        return b - a
    return None


def diff_sides(a_name: str, a: dict[str, Any], b_name: str, b: dict[str, Any]) -> dict[str, Any]:
    """``{"a": {name, figures}, "b": {...}, "delta": B - A}`` for two sides' figures."""
    return {
        "a": {"name": a_name, **a},
        "b": {"name": b_name, **b},
        "delta": {k: _delta(a[k], b[k]) for k in a},
    }
