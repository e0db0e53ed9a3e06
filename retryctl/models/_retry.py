"""Transport retries for network backends, owned by tenacity (the HTTP client's own retries are off).

Only :class:`TransientBackendError` is retried (and :class:`MalformedResponse` when asked); a server's
``Retry-After`` is honoured exactly, and one longer than ``max_retry_after_s`` ends the retrying at once so
the controller can decide (switch model, open a breaker) instead of the call sleeping for minutes.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

from tenacity import AsyncRetrying, RetryCallState, retry_if_exception, stop_after_attempt

from retryctl._log import get_logger
from retryctl._turn import yielding
from retryctl.exceptions import ConfigError
from retryctl.models._errors import BackendError

__all__ = ["RetrySettings", "call_with_retries"]

T = TypeVar("T")
Sleep = Callable[[float], Awaitable[None]]

_log = get_logger("retryctl.models")


@dataclass(frozen=True, kw_only=True)
class RetrySettings:
    """How a network backend retries one request."""

    attempts: int = 4
    """Tries in all, the first included; 1 turns retrying off."""
    initial_wait_s: float = 0.5
    """Backoff before the second try; it doubles each time up to ``max_wait_s``."""
    max_wait_s: float = 20.0
    """Longest backoff between tries (without a ``Retry-After``)."""
    max_retry_after_s: float = 60.0
    """A ``Retry-After`` longer than this is not waited for: the error goes to the caller."""
    jitter: bool = True
    """Draw each backoff uniformly in [0, backoff] (full jitter) so clients do not retry in step."""
    retry_malformed: bool = False
    """Also retry bodies that are not a usable completion (a flaky proxy); off by default."""

    def __post_init__(self) -> None:
        if isinstance(self.attempts, bool) or not isinstance(self.attempts, int) or self.attempts < 1:
            raise ConfigError(field="attempts", value=self.attempts, problem="must be an integer >= 1")
        for name in ("initial_wait_s", "max_wait_s", "max_retry_after_s"):
            value = getattr(self, name)
            # ``not value >= 0`` also refuses NaN, which would make every backoff NaN.
            if isinstance(value, bool) or not isinstance(value, int | float) or not value >= 0:
                raise ConfigError(field=name, value=value, problem="must be a number >= 0")

    def should_retry(self, exc: BaseException) -> bool:
        """Whether ``exc`` is worth another try under these settings."""
        if not isinstance(exc, BackendError):
            return False
        if exc.retry_after_s is not None and exc.retry_after_s > self.max_retry_after_s:
            return False
        return exc.retryable or (self.retry_malformed and exc.error_class == "validation")

    def backoff(self, failed_attempts: int, exc: BaseException | None) -> float:
        """Seconds to wait after ``failed_attempts`` failures, the last of them ``exc``."""
        if isinstance(exc, BackendError) and exc.retry_after_s is not None:
            return max(0.0, exc.retry_after_s)
        ceiling = min(self.max_wait_s, self.initial_wait_s * 2 ** max(0, failed_attempts - 1))
        return random.uniform(0.0, ceiling) if self.jitter else ceiling


async def call_with_retries(
    fn: Callable[[], Awaitable[T]],
    settings: RetrySettings,
    *,
    sleep: Sleep | None = None,
    label: str = "",
) -> T:
    """Await ``fn()`` until it succeeds or a non-retryable error or the attempt limit ends it.

    The error that ends it is re-raised with ``attempts`` set to the number of tries made.
    """
    tries = 0

    async def once() -> T:
        nonlocal tries
        tries += 1
        try:
            return await fn()
        except BackendError as exc:
            exc.attempts = tries
            raise

    def wait(state: RetryCallState) -> float:
        exc = state.outcome.exception() if state.outcome else None
        return settings.backoff(state.attempt_number, exc)

    def log_retry(state: RetryCallState) -> None:
        exc = state.outcome.exception() if state.outcome else None
        wait_s = state.next_action.sleep if state.next_action else 0.0
        _log.warning(
            "backend.retry", backend=label, attempt=state.attempt_number, wait_s=wait_s, error=str(exc)
        )

    retrying = AsyncRetrying(
        stop=stop_after_attempt(settings.attempts),
        wait=wait,
        retry=retry_if_exception(settings.should_retry),
        before_sleep=log_retry,
        reraise=True,
        sleep=yielding(sleep if sleep is not None else asyncio.sleep),
    )
    return await retrying(once)
