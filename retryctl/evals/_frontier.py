"""The agent's operating point read against its members' risk–coverage curves and the oracle's.

A selective system is judged at the coverage it chose: the agent that accepts 30 % of the tasks at
precision 0.85 is good only if no simpler rule does better at 30 %. Each member of the group (the bare
model's majority, each tool's majority) answers every task with a confidence (its vote share);
answering only its most confident tasks traces its risk–coverage curve. The agent's point is then
compared with the best member's curve *at the agent's coverage*: a gap below 0 is precision a plain
"trust the most unanimous member" rule would have had.

The **oracle** is the frontier no selection rule over these members can beat: a task is answerable
when some member's majority is right (or, looser, when any one sample of any member is). Answering
the answerable tasks first, its precision is 1 up to the share answerable ``A`` and ``A / c`` beyond.

``model@1`` is not a member here: its one sample is the first of ``model@N``'s.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from retryctl._answers import answers_agree
from retryctl._scores import Scores

__all__ = ["COVERAGES", "oracle_rows", "precision_at", "selective"]

COVERAGES = (0.3, 0.5)
"""The coverages every system's precision is read at."""

NOT_A_MEMBER = "model@1"


def precision_at(curve: Sequence[tuple[float, float]], coverage: float) -> float | None:
    """Precision (1 - risk) answering the most confident first until at least ``coverage`` of the tasks
    are answered; tasks tied in confidence enter together, so the first point at or past it counts.
    ``None`` for an empty curve."""
    for covered, risk in curve:
        if covered >= coverage - 1e-12:
            return 1.0 - risk
    return None


def _right(answer: Any, gold: Any) -> bool:
    return answer is not None and gold is not None and answers_agree(str(answer), str(gold))


def oracle_rows(baselines: Iterable[Mapping[str, Any]]) -> dict[str, float | int]:
    """Share of tasks answerable by some member: ``majority`` (some member's majority is right) and
    ``any_sample`` (some sample of some member is right), over ``tasks`` baseline lines."""
    lines = list({str(line.get("id")): line for line in baselines}.values())
    majority = sample = 0
    for line in lines:
        members = {k: v for k, v in (line.get("systems") or {}).items() if k != NOT_A_MEMBER}
        majority += any(bool(v.get("correct")) for v in members.values())
        gold = line.get("gold")
        sample += any(_right(a, gold) for v in members.values() for a in v.get("answers") or [])
    n = len(lines)
    return {
        "tasks": n,
        "majority": majority / n if n else 0.0,
        "any_sample": sample / n if n else 0.0,
    }


def _oracle_precision(answerable: float, coverage: float) -> float:
    return 1.0 if coverage <= answerable or coverage <= 0 else answerable / coverage


def selective(
    figures: Mapping[str, Scores], baselines: Iterable[Mapping[str, Any]], *, agent: str = "agent"
) -> dict[str, Any]:
    """Every system's precision at :data:`COVERAGES` and its operating point (coverage, accepted
    precision); the oracle rows; and, when ``agent`` has a point, the best member's curve at the
    agent's coverage, the gap, and the oracle's precision there."""
    systems = {
        name: {
            "precision_at": {str(c): precision_at(s.risk_coverage, c) for c in COVERAGES},
            "coverage": s.coverage,
            "precision": s.accepted_precision,
        }
        for name, s in figures.items()
    }
    answerable = oracle_rows(baselines)
    oracle = {
        kind: {
            "answerable": answerable[kind],
            "precision_at": {str(c): _oracle_precision(float(answerable[kind]), c) for c in COVERAGES},
        }
        for kind in ("majority", "any_sample")
        if answerable["tasks"]  # no baselines: no members to be an oracle over
    }
    out: dict[str, Any] = {"coverages": list(COVERAGES), "systems": systems, "oracle": oracle}
    point = figures.get(agent)
    members = {n: s for n, s in figures.items() if n not in (agent, NOT_A_MEMBER)}
    if point is None or point.accepted_precision is None:
        return out
    at = point.coverage
    on_curves = {n: precision_at(s.risk_coverage, at) for n, s in members.items()}
    known = {n: p for n, p in on_curves.items() if p is not None}
    best = max(known, key=lambda n: known[n]) if known else None
    out["agent"] = {
        "coverage": at,
        "precision": point.accepted_precision,
        "best_member": best,
        "best_member_precision": known[best] if best else None,
        "gap": point.accepted_precision - known[best] if best else None,
        "oracle_precision": {k: _oracle_precision(float(answerable[k]), at) for k in oracle},
    }
    return out
