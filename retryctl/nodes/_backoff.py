"""Backoff between retries: tenacity's exponential wait, raised to the server's ``Retry-After`` when it
sent one (a server that says "come back in 7 s" is not helped by a retry after 0.5 s)."""

from __future__ import annotations

from tenacity import RetryCallState, Retrying
from tenacity.wait import wait_base, wait_exponential

from retryctl.controller import classify
from retryctl.exceptions import ConfigError

__all__ = ["WaitRetryAfter", "backoff_seconds"]


class WaitRetryAfter(wait_base):
    """A tenacity wait: ``max(fallback, Retry-After)``, capped at ``max_wait_s``.

    The ``Retry-After`` is read from the failed attempt's exception through
    :func:`~retryctl.controller.classify` (HTTP headers, ``retry-after-ms``, an HTTP date).
    """

    def __init__(self, fallback: wait_base | None = None, *, max_wait_s: float = 120.0) -> None:
        if not max_wait_s >= 0:
            raise ConfigError(field="max_wait_s", value=max_wait_s, problem="must be >= 0")
        self.fallback = fallback if fallback is not None else wait_exponential(multiplier=0.5, max=30)
        self.max_wait_s = max_wait_s

    def __call__(self, retry_state: RetryCallState) -> float:
        retry_after = None
        outcome = retry_state.outcome
        if outcome is not None and outcome.failed:
            exc = outcome.exception()
            if exc is not None:
                retry_after = classify(exc).retry_after_s
        return self.seconds(retry_state, retry_after)

    def for_retry(self, retry_number: int, retry_after_s: float | None) -> float:
        """The wait before retry ``retry_number`` (1-based) outside a tenacity loop: the attempt
        engine's ``backoff`` (:class:`~retryctl.controller.AttemptEngine`)."""
        state = RetryCallState(retry_object=Retrying(), fn=None, args=(), kwargs={})
        state.attempt_number = retry_number
        return self.seconds(state, retry_after_s)

    def seconds(self, retry_state: RetryCallState, retry_after_s: float | None) -> float:
        """The wait for ``retry_state`` when the fault asked for ``retry_after_s``."""
        wait = float(self.fallback(retry_state))
        if retry_after_s is not None:
            wait = max(wait, retry_after_s)
        return min(wait, self.max_wait_s)


def backoff_seconds(wait: WaitRetryAfter, *, retry_number: int, retry_after_s: float | None) -> float:
    """The wait before retry ``retry_number`` (1-based) outside a tenacity loop (a graph's retry node)."""
    return wait.for_retry(retry_number, retry_after_s)
