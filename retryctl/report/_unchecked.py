"""The ``unchecked`` section: how many accepts no check ran on (only that the call returned), per step
and per model or tool. Such an accept claims no confidence (its record's ``checked`` is false), so a
reader can tell a tool's results that a validator passed from ones nobody looked at.
"""

from __future__ import annotations

from typing import Any

from retryctl.report._model import Analysis

__all__ = ["ROWS", "unchecked"]

ROWS = 50
"""Rows kept in each list (the steps and the targets with the most unchecked accepts first)."""


def unchecked(analysis: Analysis) -> dict[str, Any]:
    """``accepts`` and ``unchecked`` in all and their ``share`` (``None`` without accepts); then the
    same three figures per model or tool (``by_target``, every one that accepted) and per step id
    (``by_step``, the steps with an unchecked accept: a step id a tool call's id makes unique would
    otherwise list every call)."""
    steps: dict[str, list[int]] = {}
    targets: dict[str, list[int]] = {}
    for (step_id, target, checked), n in analysis.accepts.items():
        for key, table in ((step_id, steps), (target, targets)):
            counts = table.setdefault(key, [0, 0])
            counts[0] += n
            counts[1] += 0 if checked else n
    whole = _figures(sum(a for a, _ in steps.values()), sum(u for _, u in steps.values()))

    def rows(table: dict[str, list[int]], name: str, *, every: bool) -> list[dict[str, Any]]:
        out = [{name: key, **_figures(a, u)} for key, (a, u) in table.items() if every or u]
        out.sort(key=lambda r: (-r["unchecked"], -r["accepts"], r[name]))
        return out[:ROWS]

    by_target = rows(targets, "target", every=True)
    for found in by_target:
        target = found["target"]
        found["kind"] = "tool" if target in analysis.tools else ("none" if target == "(none)" else "model")
    return {**whole, "by_step": rows(steps, "step_id", every=False), "by_target": by_target}


def _figures(accepts: int, not_checked: int) -> dict[str, Any]:
    return {"accepts": accepts, "unchecked": not_checked, "share": not_checked / accepts if accepts else None}
