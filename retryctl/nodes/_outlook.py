"""What a sampling attempt's ``decide`` is told of the budget ahead: the ledgers the next attempt would
be charged to, and what that attempt would reserve on each member of the group (its first draw), so
that a retry, switch or refine the budget cannot pay for is a stop at once, not a wait and then a stop.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from retryctl.controller import Ledger, LedgerSnapshot, PriceTable, StepLedger, Usage
from retryctl.models._messages import Message
from retryctl.nodes._sampling import DrawRequest, OutputLimit, SamplingSchedule, _estimate

__all__ = ["first_draw", "outlook"]


def first_draw(
    messages: Sequence[Message],
    model: str,
    *,
    min_samples: int,
    max_samples: int,
    schedule: SamplingSchedule,
    prices: PriceTable | None,
    output_limit: OutputLimit | None = None,
) -> Usage:
    """What an attempt on ``model`` reserves before it draws anything: its first draw, of
    ``min_samples`` (one call, its prompt and its output limit for each sample, their price), as
    :func:`~retryctl.nodes._sampling.sampling` reserves it when a larger first batch does not fit."""
    params = schedule.params(attempt=1, drawn=0, disagreed=False)
    request = DrawRequest(min(min_samples, max_samples), params)
    return _estimate(messages, request, model, prices, output_limit)


def outlook(
    ledgers: Sequence[Ledger | StepLedger],
    messages: Sequence[Message],
    members: Sequence[str],
    *,
    output_limits: Mapping[str, OutputLimit | None] | None = None,
    min_samples: int,
    max_samples: int,
    schedule: SamplingSchedule,
    prices: PriceTable | None,
) -> dict[str, Any]:
    """The ``ledgers`` and ``next_cost`` of an observation (see :class:`~retryctl.controller.Observation`):
    nothing when no ledger limits anything. ``output_limits``: a member's backend's ``output_limit``
    (a chat model's own ``max_tokens``), by member, as the draw itself reserves it."""
    snapshots: list[LedgerSnapshot] = [ledger.snapshot() for ledger in ledgers]
    if not any(_limited(s) for s in snapshots):
        return {}
    cost = {
        member: first_draw(
            messages,
            member,
            min_samples=min_samples,
            max_samples=max_samples,
            schedule=schedule,
            prices=prices,
            output_limit=(output_limits or {}).get(member),
        )
        for member in members
    }
    return {"ledgers": snapshots, "next_cost": cost}


def _limited(snapshot: LedgerSnapshot | None) -> bool:
    while snapshot is not None:
        if any(v is not None for v in snapshot.limit.values()):
            return True
        snapshot = snapshot.parent
    return False
