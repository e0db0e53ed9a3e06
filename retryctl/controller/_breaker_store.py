"""Where circuit-breaker state lives: the store protocol, the record it keeps, and the in-memory store.

A store keeps one :class:`BreakerRecord` per key and offers one write primitive, :meth:`update`: an atomic
read-modify-write that applies a pure function to the record. :class:`~retryctl.controller.Breaker` owns
the state machine; a store only makes its steps atomic. The stores that do I/O, on SQLite (shared by the
processes of one machine) and on Redis (shared by many machines), live in :mod:`retryctl.runtime`, so
that the controller stays free of I/O.

A store that cannot be read or written (a database locked past the busy timeout, an unwritable file, a
Redis server that went away) raises :class:`~retryctl.exceptions.BreakerStoreError`, never its driver's
own error type, so a breaker can decide what an unreachable store means (``BreakerConfig.on_store_error``).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import Protocol, TypeVar, runtime_checkable

from retryctl.controller._clock import Clock, monotonic

__all__ = [
    "BreakerRecord",
    "BreakerState",
    "BreakerStore",
    "MemoryBreakerStore",
]

T = TypeVar("T")


class BreakerState(StrEnum):
    """The three states of a circuit breaker."""

    CLOSED = "closed"
    """Calls flow; consecutive failures are counted."""
    OPEN = "open"
    """Calls are refused until the cool-down ends."""
    HALF_OPEN = "half_open"
    """A limited number of probe calls may test whether the key recovered."""


@dataclass(frozen=True, slots=True)
class BreakerRecord:
    """The stored state of one key's breaker. Times are in the breaker clock's seconds."""

    state: BreakerState = BreakerState.CLOSED
    """As stored; an ``open`` record whose cool-down has ended reads as ``half_open``."""
    failures: int = 0
    """Consecutive failures since the breaker last closed."""
    opened_at: float | None = None
    """When it last opened."""
    probes: int = 0
    """Probe calls admitted in the current half-open window."""
    successes: int = 0
    """Successful probes in the current half-open window."""
    last_probe_at: float | None = None
    """When the last probe was admitted."""


CLOSED_RECORD = BreakerRecord()

Update = Callable[[BreakerRecord], tuple[BreakerRecord, T]]


@runtime_checkable
class BreakerStore(Protocol):
    """Storage for breaker records with an atomic read-modify-write."""

    blocking: bool
    """True if an operation may wait on another process: async callers run it in a worker thread."""
    default_clock: Clock
    """The clock a breaker uses with this store unless given one."""

    def update(self, key: str, fn: Update[T]) -> T:
        """Apply ``fn`` to ``key``'s record atomically, store the record it returns, return its value.

        A store that cannot be reached raises :class:`~retryctl.exceptions.BreakerStoreError`.
        """
        ...

    def get(self, key: str) -> BreakerRecord:
        """``key``'s record (a closed record if it was never written)."""
        ...

    def items(self) -> dict[str, BreakerRecord]:
        """Every stored record by key."""
        ...

    def reset(self, key: str | None = None) -> None:
        """Forget ``key`` (closing its breaker), or every key."""
        ...


class MemoryBreakerStore:
    """Records in a dict under a lock: for one process, gone on exit."""

    blocking: bool = False
    default_clock: Clock

    def __init__(self) -> None:
        self.default_clock = monotonic
        self._lock = threading.Lock()
        self._records: dict[str, BreakerRecord] = {}

    def update(self, key: str, fn: Update[T]) -> T:
        """Apply ``fn`` to ``key``'s record under the lock; store its record, return its value."""
        with self._lock:
            record, result = fn(self._records.get(key, CLOSED_RECORD))
            self._records[key] = record
            return result

    def get(self, key: str) -> BreakerRecord:
        """``key``'s record (closed if never written)."""
        with self._lock:
            return self._records.get(key, CLOSED_RECORD)

    def items(self) -> dict[str, BreakerRecord]:
        """Every record by key."""
        with self._lock:
            return dict(self._records)

    def reset(self, key: str | None = None) -> None:
        """Forget ``key`` or every key."""
        with self._lock:
            if key is None:
                self._records.clear()
            else:
                self._records.pop(key, None)


def summary(exc: BaseException) -> str:
    """An exception as one line: ``Type: message``, cut at 300 characters."""
    text = f"{type(exc).__name__}: {exc}".splitlines()[0]
    return text if len(text) <= 300 else f"{text[:300]}..."
