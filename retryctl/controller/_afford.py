"""Whether the ledgers can pay for one more attempt: the test :meth:`Ledger.try_reserve` makes, on the
plain data of their snapshots, so that :func:`~retryctl.controller.decide` issues a retry, switch or
refine only when the attempt it calls for could start (and says which limit refuses it otherwise).

The figures are compared exactly, as the ledger compares them (``0.1 + 0.2`` fits a limit of ``0.3``).
A wait before the attempt (a retry's backoff) is wall time: the attempt must still find some of the
wall-time budget left once it is over.
"""

from __future__ import annotations

from collections.abc import Sequence

from retryctl.controller._budget import ADDITIVE_NAMES, Usage
from retryctl.controller._exhaustion import Exhaustion, LedgerSnapshot
from retryctl.controller._ledger import _clock_refuses, _exact, _Num, _over_limit

__all__ = ["ONE_ATTEMPT", "refusal"]

ONE_ATTEMPT = Usage(attempts=1)
"""The least any attempt reserves, whatever the driver: it is a call."""


def refusal(ledgers: Sequence[LedgerSnapshot], cost: Usage, wait_s: float = 0.0) -> Exhaustion | None:
    """The first limit, at any scope of ``ledgers`` (each snapshot with its parents), that refuses an
    attempt costing ``cost`` after a wait of ``wait_s`` seconds; ``None`` when every scope can pay."""
    want = {name: _exact(getattr(cost, name)) for name in ADDITIVE_NAMES}
    for snapshot in ledgers:
        scope: LedgerSnapshot | None = snapshot
        while scope is not None:
            refused = _refusal(scope, want, cost.wall_s, wait_s)
            if refused is not None:
                return refused
            scope = scope.parent
    return None


def _refusal(scope: LedgerSnapshot, want: dict[str, _Num], wall_s: float, wait_s: float) -> Exhaustion | None:
    limits = {n: _exact(v) for n in ADDITIVE_NAMES if (v := scope.limit.get(n)) is not None}
    used = {n: _exact(scope.used.get(n, 0.0)) for n in limits}
    held = {n: _exact(scope.reserved.get(n, 0.0)) for n in limits}
    name = _over_limit(limits, used, held, want)
    if name is not None:
        return Exhaustion(
            limit_name=name,
            limit=float(limits[name]),
            used=float(used[name]),
            scope=scope.scope,
            requested=float(want[name]),
            reserved=float(held[name]),
        )
    limit = scope.limit.get("wall_s")
    if limit is not None:
        waited = scope.used.get("wall_s", 0.0) + wait_s  # the wait is wall time spent before the call
        if _clock_refuses(waited, wall_s, limit):
            return Exhaustion(
                limit_name="wall_s",
                limit=limit,
                used=scope.used.get("wall_s", 0.0),
                scope=scope.scope,
                requested=wait_s + wall_s,
            )
    return None
