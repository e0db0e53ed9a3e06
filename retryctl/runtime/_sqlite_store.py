"""Breaker records in a SQLite file: they survive a restart and are shared by the processes of one machine.

Each update runs in a ``BEGIN IMMEDIATE`` transaction (the write lock is taken before the read, so two
processes cannot both read the old state), the database is in WAL mode, and a busy writer is waited for
up to ``busy_timeout_s``. Monotonic clocks differ between processes and reboots, so its default clock is
wall time (``time.time``).
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from types import TracebackType
from typing import TypeVar

from retryctl.controller._breaker_store import CLOSED_RECORD, BreakerRecord, BreakerState, Update, summary
from retryctl.controller._clock import Clock
from retryctl.exceptions import BreakerStoreError

__all__ = ["SQLiteBreakerStore"]

T = TypeVar("T")


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
