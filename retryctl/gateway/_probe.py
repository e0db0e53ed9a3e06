"""Admission to an upstream whose breaker may be half-open: requests wait for the probe's outcome.

A half-open breaker lets ``half_open_max_calls`` probes through (one by default). Refusing every other
request at once turned a burst of 20 into one answer and 19 errors, though the probe that closed the
breaker a moment later showed the upstream healthy. So a request refused while a probe is in flight
waits, up to ``wait_s``, for the probe's outcome: a success closes the breaker and every waiting
request goes ahead; a failure opens it again and they are refused with its new cool-down; an outcome
that says nothing of the upstream (the probe was refused for its own content) frees the slot for the
next waiting request. An open breaker (cooling down) still refuses at once: that is what it is for.

Why a wait and not a bigger probe budget: a budget of k probes still answers a burst of n with n - k
errors, and sends k requests to an upstream that may be down; a wait sends one, and costs the others
only the probe's latency. The wait is bounded twice: by ``wait_s`` (the gateway's upstream timeout) and
by the gateway's ``max_concurrency``, since a waiting request holds its place.

The outcome is told to this worker's waiters at once (:meth:`ProbeWait.settled`); with a breaker store
shared by workers or replicas, the probe may be another's, so waiters also read the store every
``poll_s``.
"""

from __future__ import annotations

import asyncio
import contextlib
import time

from retryctl.controller import Breaker, BreakerState
from retryctl.controller._breaker import Admission
from retryctl.exceptions import BreakerOpen

__all__ = ["ProbeWait"]


class ProbeWait:
    """Admits requests to ``key``'s breaker, those refused during a probe after waiting for it."""

    def __init__(self, breaker: Breaker, key: str, *, wait_s: float, poll_s: float = 0.25) -> None:
        self.breaker = breaker
        self.key = key
        self.wait_s = wait_s
        self.poll_s = poll_s
        self._event: asyncio.Event | None = None
        """Set when this worker reports an outcome; made by the first waiter (none on the fast path)."""

    async def admit(self) -> Admission:
        """The breaker's admission, after waiting (bounded) while a probe is in flight."""
        admission = self.breaker.admit(self.key)
        if admission.refused is None or not self._probing(admission):
            return admission
        deadline = time.monotonic() + self.wait_s
        while await self._waited(deadline):
            admission = self.breaker.admit(self.key)
            if admission.refused is None or not self._probing(admission):
                return admission
        return admission

    async def while_probing(self) -> None:
        """Wait (bounded) while a half-open probe is in flight, taking no slot: for a caller that asks
        the breaker itself (an adaptive request's attempts)."""
        deadline = time.monotonic() + self.wait_s
        while self._in_flight() and await self._waited(deadline):
            pass

    async def _waited(self, deadline: float) -> bool:
        """Wait for an outcome or the next poll; ``False`` when the wait is over."""
        left = deadline - time.monotonic()
        if left <= 0:
            return False
        if self._event is None:
            self._event = asyncio.Event()
        with contextlib.suppress(TimeoutError):  # a poll: the probe may be another worker's
            await asyncio.wait_for(self._event.wait(), timeout=min(self.poll_s, left))
        return True

    def _in_flight(self) -> bool:
        """Whether the breaker is half-open with every probe slot taken."""
        try:
            half_open = self.breaker.record(self.key).state is BreakerState.HALF_OPEN
            return half_open and self.breaker.retry_at(self.key) is not None
        except Exception:  # a failing store: the caller's own admission decides
            return False

    def settled(self) -> None:
        """A call's outcome was reported (or its slot released): wake the waiters to ask again."""
        event, self._event = self._event, None
        if event is not None:
            event.set()

    def _probing(self, admission: Admission) -> bool:
        """Whether the refusal is a half-open breaker's whose probes are in flight (not an open one's,
        nor a failing store's)."""
        if not isinstance(admission.refused, BreakerOpen):
            return False
        try:
            return self.breaker.record(self.key).state is BreakerState.HALF_OPEN
        except Exception:  # a store that failed since: refuse as the admission did
            return False
