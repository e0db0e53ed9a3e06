"""Transport retries for network backends, owned by tenacity (the HTTP client's own retries are off).

Only :class:`TransientBackendError` is retried (and :class:`MalformedResponse` when asked); a server's
``Retry-After`` is honoured exactly, and one longer than ``max_retry_after_s`` ends the retrying at once so
the controller can decide (switch model, open a breaker) instead of the call sleeping for minutes.
A 500 that the same request meets twice, word for word, is not retried further (:class:`RepeatedFault`):
a server that is failing answers with faults that come and go, one that refuses the request's content
(llama.cpp's server on a tool-call conversation) answers the same every time.

Every retry is told, before its backoff, to the listener its caller installed with
:func:`transport_retries` (the sampling driver charges it to the budget ledger and writes it into the
verdict's evidence); a listener that answers ``False`` gives the retry up, and the failed try's error
goes to the caller at once.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import TypeVar

from tenacity import AsyncRetrying, RetryCallState, retry_if_exception

from retryctl._log import get_logger
from retryctl.exceptions import ConfigError
from retryctl.models._errors import BackendError, RepeatedFault, ServerFault

__all__ = ["RetryListener", "RetrySettings", "TransportRetry", "call_with_retries", "transport_retries"]

T = TypeVar("T")
Sleep = Callable[[float], Awaitable[None]]

_log = get_logger("retryctl.models")


@dataclass(frozen=True, kw_only=True)
class TransportRetry:
    """One transport retry a backend is about to make: the try that failed, and the wait before the next."""

    backend: str
    """The backend (model) whose request failed."""
    failed_try: int
    """Which try of the request failed (1 for the first); the retry is try ``failed_try + 1``."""
    tries: int
    """Tries the request may make in all (:attr:`RetrySettings.attempts`)."""
    error_class: str
    """What retrying can achieve, as :attr:`BackendError.error_class` says: ``transient`` (or
    ``validation`` for a malformed body retried under ``retry_malformed``)."""
    fault: str
    """The failed try's error type, e.g. ``TransientBackendError``."""
    status_code: int | None
    """Its HTTP status, when it had one."""
    wait_s: float
    """The backoff before the retry (the server's ``Retry-After`` when it sent one)."""
    error: str
    """The failed try's error message."""

    def __str__(self) -> str:
        # The message names the HTTP status already (``HTTP 503: ...``).
        return (
            f"transport retry of {self.backend}: try {self.failed_try} of {self.tries} failed "
            f"({self.error_class} {self.fault}: {self.error}); waited {self.wait_s:.3g} s"
        )


RetryListener = Callable[[TransportRetry], bool]
"""Told of each transport retry before its backoff; ``False`` gives the retry up (the error is raised)."""

# Why a context variable, when the rest of the library passes its configuration explicitly: a retry
# happens deep inside ``backend.sample(messages, params, k=k)``, a protocol users implement too, so a
# parameter there would break every user's backend; an attribute on the result would come too late
# for a budget to refuse the retry, and the candidates of a failed call never come back. The variable
# is set by the caller of one draw for that draw only, and asyncio copies it into the tasks of
# gathered requests and ``run_coroutine_threadsafe`` into a sync twin's private loop, so each
# concurrent draw sees its own listener. Outside a draw there is none, and a retry is only logged.
_LISTENER: ContextVar[RetryListener | None] = ContextVar("retryctl_transport_listener", default=None)


@contextmanager
def transport_retries(listener: RetryListener) -> Iterator[None]:
    """``with transport_retries(listener): await backend.sample(...)``: tell ``listener`` of each
    transport retry the calls made inside make, and let it refuse them."""
    token = _LISTENER.set(listener)
    try:
        yield
    finally:
        _LISTENER.reset(token)


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
    """Await ``fn()`` until it succeeds or a non-retryable error, the attempt limit or the listener
    (:func:`transport_retries`) ends it.

    The error that ends it is re-raised with ``attempts`` set to the number of tries made. A 500 that
    the try before met word for word (:class:`ServerFault`, the same request sent again) ends it as
    :class:`RepeatedFault`: the request's own failure, which more tries would only meet again.
    """
    tries = 0
    previous: BackendError | None = None
    listener = _LISTENER.get()

    async def once() -> T:
        nonlocal tries, previous
        tries += 1
        try:
            return await fn()
        except ServerFault as exc:
            exc.attempts = tries
            if exc.repeats(previous):  # the request's own: terminal, so tenacity tries no more
                raise RepeatedFault(exc) from None
            previous = exc
            raise
        except BackendError as exc:
            exc.attempts = tries
            previous = exc
            raise

    def wait(state: RetryCallState) -> float:
        exc = state.outcome.exception() if state.outcome else None
        return settings.backoff(state.attempt_number, exc)

    def stop(state: RetryCallState) -> bool:
        if state.attempt_number >= settings.attempts:
            return True
        # Asked after the wait is drawn (tenacity >= 8.3 sets ``upcoming_sleep`` before it asks
        # ``stop``): the retry described here happens unless the listener refuses it.
        exc = state.outcome.exception() if state.outcome else None
        retry = _described(exc, state.attempt_number, settings.attempts, state.upcoming_sleep, label)
        if listener is not None and not listener(retry):
            _log.warning("backend.retry_refused", backend=retry.backend, attempt=retry.failed_try)
            return True
        _log.warning(
            "backend.retry",
            backend=retry.backend,
            attempt=retry.failed_try,
            error_class=retry.error_class,
            status=retry.status_code,
            wait_s=retry.wait_s,
            error=retry.error,
        )
        return False

    retrying = AsyncRetrying(
        stop=stop,
        wait=wait,
        retry=retry_if_exception(settings.should_retry),
        reraise=True,
        sleep=sleep if sleep is not None else asyncio.sleep,
    )
    return await retrying(once)


def _described(
    exc: BaseException | None, failed_try: int, tries: int, wait_s: float, label: str
) -> TransportRetry:
    backend_error = exc if isinstance(exc, BackendError) else None
    return TransportRetry(
        backend=label or (backend_error.backend if backend_error else ""),
        failed_try=failed_try,
        tries=tries,
        error_class=(backend_error.error_class if backend_error else None) or "transient",
        fault=type(exc).__name__,
        status_code=backend_error.status_code if backend_error else None,
        wait_s=wait_s,
        error=backend_error.message if backend_error else str(exc),
    )
