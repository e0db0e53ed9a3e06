"""Where circuit-breaker state lives: in memory, or in SQLite so it survives restarts and is shared.

A store keeps one :class:`BreakerRecord` per key and offers one write primitive, :meth:`update`: an atomic
read-modify-write that applies a pure function to the record. :class:`~retryctl.controller.Breaker` owns
the state machine; a store only makes its steps atomic.

:class:`SQLiteBreakerStore` is shared by every process on one machine that opens the same file: each
update runs in a ``BEGIN IMMEDIATE`` transaction (the write lock is taken before the read, so two
processes cannot both read the old state), the database is in WAL mode, and a busy writer is waited for
up to ``busy_timeout_s``. Monotonic clocks differ between processes and reboots, so its default clock is
wall time (``time.time``).

A store that cannot be read or written (a database locked past the busy timeout, an unwritable file, a
Redis server that went away) raises :class:`~retryctl.exceptions.BreakerStoreError`, never its driver's
own error type, so a breaker can decide what an unreachable store means (``BreakerConfig.on_store_error``).
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from types import TracebackType
from typing import Protocol, TypeVar, runtime_checkable

from retryctl.controller._clock import Clock, monotonic
from retryctl.exceptions import BreakerStoreError

__all__ = [
    "BreakerRecord",
    "BreakerState",
    "BreakerStore",
    "MemoryBreakerStore",
    "SQLiteBreakerStore",
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


_SCHEMA = """
CREATE TABLE IF NOT EXISTS breakers (
    key TEXT PRIMARY KEY,
    state TEXT NOT NULL,
    failures INTEGER NOT NULL,
    opened_at REAL,
    probes INTEGER NOT NULL,
    successes INTEGER NOT NULL,
    last_probe_at REAL,
    updated_at REAL NOT NULL
)
"""
_COLUMNS = "state, failures, opened_at, probes, successes, last_probe_at"
_Row = tuple[str, int, float | None, int, int, float | None]


def _from_row(row: _Row) -> BreakerRecord:
    state, failures, opened_at, probes, successes, last_probe_at = row
    return BreakerRecord(BreakerState(state), failures, opened_at, probes, successes, last_probe_at)


def summary(exc: BaseException) -> str:
    """An exception as one line: ``Type: message``, cut at 300 characters."""
    text = f"{type(exc).__name__}: {exc}".splitlines()[0]
    return text if len(text) <= 300 else f"{text[:300]}..."


class SQLiteBreakerStore:
    """Records in a SQLite file: they survive a restart and are shared by processes on one machine.

    Methods are thread-safe and block while another process holds the write lock (at most
    ``busy_timeout_s``); async breaker methods therefore run them in a worker thread. A store opened
    before ``fork()`` reconnects in the child rather than sharing the parent's connection.
    """

    blocking: bool = True
    default_clock: Clock

    def __init__(self, path: str | os.PathLike[str], *, busy_timeout_s: float = 5.0) -> None:
        if busy_timeout_s < 0:
            raise ValueError(f"busy_timeout_s={busy_timeout_s!r} must be >= 0")
        self.path = Path(path)
        self.busy_timeout_s = busy_timeout_s
        self.default_clock = time.time
        self._lock = threading.Lock()
        self._pid = os.getpid()
        with self._faults("connect"):
            self._conn = self._connect()

    @contextlib.contextmanager
    def _faults(self, operation: str) -> Iterator[None]:
        """Turn SQLite's errors (locked past the busy timeout, unwritable, not a database) into
        :class:`BreakerStoreError`."""
        try:
            yield
        except (sqlite3.Error, OSError) as exc:
            raise BreakerStoreError(
                store=f"sqlite:{os.fspath(self.path)}", operation=operation, problem=summary(exc)
            ) from exc

    def _connect(self) -> sqlite3.Connection:
        conn = sqlite3.connect(
            self.path,
            timeout=self.busy_timeout_s,
            isolation_level=None,  # we issue BEGIN IMMEDIATE ourselves
            check_same_thread=False,  # guarded by self._lock
        )
        conn.execute(f"PRAGMA busy_timeout = {int(self.busy_timeout_s * 1000)}")
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("PRAGMA synchronous = NORMAL")
        conn.execute(_SCHEMA)
        return conn

    def _connection(self) -> sqlite3.Connection:
        if os.getpid() != self._pid:
            # A forked child must not use the parent's connection (SQLite forbids it).
            self._pid = os.getpid()
            self._conn = self._connect()
        return self._conn

    def update(self, key: str, fn: Update[T]) -> T:
        """Apply ``fn`` in one ``BEGIN IMMEDIATE`` transaction: no other process writes in between."""
        with self._lock, self._faults("update"):
            conn = self._connection()
            conn.execute("BEGIN IMMEDIATE")  # a lock held past busy_timeout_s fails here
            try:
                row = conn.execute(f"SELECT {_COLUMNS} FROM breakers WHERE key = ?", (key,)).fetchone()
                before = CLOSED_RECORD if row is None else _from_row(row)
                record, result = fn(before)
                if record != before or row is None:
                    conn.execute(
                        f"INSERT OR REPLACE INTO breakers (key, {_COLUMNS}, updated_at)"
                        " VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                        (
                            key,
                            record.state.value,
                            record.failures,
                            record.opened_at,
                            record.probes,
                            record.successes,
                            record.last_probe_at,
                            time.time(),
                        ),
                    )
                conn.execute("COMMIT")
            except BaseException:
                if conn.in_transaction:
                    # A failing ROLLBACK (disk gone) must not hide the error that made us roll back.
                    with contextlib.suppress(sqlite3.Error):
                        conn.execute("ROLLBACK")
                raise
            return result

    def get(self, key: str) -> BreakerRecord:
        """``key``'s record (closed if never written)."""
        with self._lock, self._faults("get"):
            row = (
                self._connection()
                .execute(f"SELECT {_COLUMNS} FROM breakers WHERE key = ?", (key,))
                .fetchone()
            )
        return CLOSED_RECORD if row is None else _from_row(row)

    def items(self) -> dict[str, BreakerRecord]:
        """Every record by key."""
        with self._lock, self._faults("items"):
            rows = self._connection().execute(f"SELECT key, {_COLUMNS} FROM breakers").fetchall()
        return {row[0]: _from_row(row[1:]) for row in rows}

    def reset(self, key: str | None = None) -> None:
        """Forget ``key`` or every key."""
        with self._lock, self._faults("reset"):
            conn = self._connection()
            if key is None:
                conn.execute("DELETE FROM breakers")
            else:
                conn.execute("DELETE FROM breakers WHERE key = ?", (key,))

    def close(self) -> None:
        """Close the connection; the file keeps the state."""
        with self._lock:
            self._conn.close()

    def __enter__(self) -> SQLiteBreakerStore:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
