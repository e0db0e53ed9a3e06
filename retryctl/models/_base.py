"""The backend contract: one async method that returns k candidates, and its sync twin.

Every backend has one core. For network backends the core is async and :meth:`BackendBase.sample_sync`
drives it on a private event loop; the embedded model's core is blocking and its async method hands it to
a worker thread. Either way the twin is derived from the same core, never a copied body.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Coroutine
from typing import Any, Protocol, TypeVar, runtime_checkable

from retryctl.exceptions import ConfigError
from retryctl.models._errors import BackendTimeout
from retryctl.models._messages import MessagesLike
from retryctl.models._types import Candidate, SamplingParams

__all__ = ["BackendBase", "LoopThread", "ModelBackend", "check_k", "sample_blocking", "sample_within"]

T = TypeVar("T")


@runtime_checkable
class ModelBackend(Protocol):
    """Anything that samples candidates for a conversation."""

    @property
    def name(self) -> str:
        """The model's name as it should appear in decision logs and price tables."""
        ...

    async def sample(
        self, messages: MessagesLike, params: SamplingParams | None = None, *, k: int = 1
    ) -> list[Candidate]:
        """Return exactly ``k`` candidates, or raise a :class:`~retryctl.models.BackendError`."""
        ...


def check_k(k: int) -> None:
    """Reject a sample count below one (``ConfigError`` naming ``k``)."""
    if not isinstance(k, int) or isinstance(k, bool) or k < 1:
        raise ConfigError(field="k", value=k, problem="must be an integer >= 1")


class LoopThread:
    """An event loop in a daemon thread, started on first use.

    Sync callers of an async backend run on it, so an async HTTP client keeps one loop for its whole
    life, and the sync twin works even when the calling thread already runs a loop (a notebook).
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None

    def _ensure(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._loop is None:
                loop = asyncio.new_event_loop()
                thread = threading.Thread(target=loop.run_forever, name="retryctl-backend-loop", daemon=True)
                thread.start()
                self._loop, self._thread = loop, thread
            return self._loop

    def run(self, coro: Coroutine[Any, Any, T], *, timeout_s: float | None = None, backend: str = "") -> T:
        """Run ``coro`` to completion on the private loop and return its result (or raise its error).

        With ``timeout_s``, a call still running then is cancelled and :class:`BackendTimeout` (naming
        ``backend``) is raised instead.
        """
        future = asyncio.run_coroutine_threadsafe(coro, self._ensure())
        try:
            return future.result(timeout_s)
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise _past_deadline(timeout_s, backend) from None

    def close(self) -> None:
        """Stop the loop and join its thread; a later :meth:`run` starts a new one."""
        with self._lock:
            loop, thread = self._loop, self._thread
            self._loop = self._thread = None
        if loop is not None and thread is not None:
            loop.call_soon_threadsafe(loop.stop)
            thread.join()
            loop.close()


_SHARED_LOOP = LoopThread()  # sync callers of async-only backends share one private event loop


def _past_deadline(timeout_s: float | None, backend: str) -> BackendTimeout:
    return BackendTimeout(f"no answer within the {timeout_s or 0:.3g} s of wall budget left", backend=backend)


def sample_blocking(
    backend: ModelBackend,
    messages: MessagesLike,
    params: SamplingParams | None = None,
    *,
    k: int = 1,
    timeout_s: float | None = None,
) -> list[Candidate]:
    """Sample from any backend without an event loop: its ``sample_sync`` twin when it has one, else its
    async ``sample`` on a private loop (a user's backend may implement only the protocol's method).

    ``timeout_s`` bounds the call (:class:`BackendTimeout` past it) wherever the call runs on an event
    loop; a backend's own blocking ``sample_sync`` (the embedded model's decoding) cannot be cut short
    and is bounded by its ``max_tokens`` instead.
    """
    if timeout_s is not None and isinstance(backend, BackendBase) and backend._async_core():
        return backend._runner.run(
            backend.sample(messages, params, k=k), timeout_s=timeout_s, backend=backend.name
        )
    sample_sync = getattr(backend, "sample_sync", None)
    if callable(sample_sync):
        if timeout_s is not None and getattr(backend, "sync_takes_timeout", False) is True:
            # A wrapper (ConstrainedBackend) hands the bound on to the model it wraps.
            bounded: list[Candidate] = sample_sync(messages, params, k=k, timeout_s=timeout_s)
            return bounded
        drawn: list[Candidate] = sample_sync(messages, params, k=k)
        return drawn
    return _SHARED_LOOP.run(backend.sample(messages, params, k=k), timeout_s=timeout_s, backend=backend.name)


async def sample_within(
    backend: ModelBackend,
    messages: MessagesLike,
    params: SamplingParams | None = None,
    *,
    k: int = 1,
    timeout_s: float | None = None,
) -> list[Candidate]:
    """``await backend.sample(...)``, cancelled with :class:`BackendTimeout` once ``timeout_s`` passes.

    The controller passes the wall budget left, so that a backend's own transport retries (which may
    honour a long ``Retry-After``) cannot carry a step past its time limit. In a batch the task gives
    up its turn around the call in its driver (the sampling loop's ``run_async``), not here: models
    know nothing of batches.
    """
    call: Awaitable[list[Candidate]] = backend.sample(messages, params, k=k)
    if timeout_s is None:
        return await call
    try:
        return await asyncio.wait_for(call, timeout_s)
    except TimeoutError:
        raise _past_deadline(timeout_s, backend.name) from None


class BackendBase(ABC):
    """Shared base of the built-in backends: the sync twin and resource cleanup."""

    def __init__(self) -> None:
        self._runner = LoopThread()

    @property
    @abstractmethod
    def name(self) -> str:
        """The model's name as it should appear in decision logs and price tables."""

    @abstractmethod
    async def sample(
        self, messages: MessagesLike, params: SamplingParams | None = None, *, k: int = 1
    ) -> list[Candidate]:
        """Return exactly ``k`` candidates, or raise a :class:`~retryctl.models.BackendError`."""

    def sample_sync(
        self, messages: MessagesLike, params: SamplingParams | None = None, *, k: int = 1
    ) -> list[Candidate]:
        """Blocking twin of :meth:`sample`."""
        return self._runner.run(self.sample(messages, params, k=k))

    def output_limit(self, params: SamplingParams) -> int:
        """The most output tokens one candidate can have under ``params`` (what a draw reserves):
        ``params.token_cap`` (``max_tokens``, or the stages' caps summed), which the built-in backends
        send with every call."""
        return params.token_cap

    @classmethod
    def _async_core(cls) -> bool:
        """Whether the core is :meth:`sample` (the sync twin is the inherited one), so a call can be cut."""
        return cls.sample_sync is BackendBase.sample_sync

    async def aclose(self) -> None:  # noqa: B027  (an optional hook: most backends hold nothing)
        """Release network clients and the like (nothing by default)."""

    def close(self) -> None:
        """Release resources, including the private loop of the sync twin."""
        self._runner.run(self.aclose())
        self._runner.close()
