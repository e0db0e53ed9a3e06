"""The tool-call journal: what a wrapped tool call already did, so a resumed node does not do it again.

LangGraph re-runs a whole node when it resumes after an ``interrupt()``. A tool node that asked the
user about one call would therefore call every tool of that turn again, including a non-idempotent one
(a payment, an e-mail). The journal records, per thread, task and tool-call id, the result of each
non-idempotent call and the final result of every call; the re-run node reads them instead of
calling again. The task (LangGraph's ``checkpoint_ns``, the same when a step is resumed, new for each
later step) keeps a model that reuses a tool-call id in a later turn from being served the old result.
Results are kept whole (content blocks, artifacts, ``Command``s, lists of them), serialized as
LangGraph's checkpointer serializes state. :class:`SQLiteToolJournal` survives the process, so a run
resumed elsewhere from a SQLite checkpoint reads the same records.
"""

from __future__ import annotations

import base64
import json
import os
import sqlite3
import threading
from typing import Any, Protocol, runtime_checkable

from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

__all__ = ["MemoryToolJournal", "SQLiteToolJournal", "ToolJournal", "dump_result", "load_result"]

_SERDE = JsonPlusSerializer()


def dump_result(result: Any) -> dict[str, str]:
    """A JSON-safe record of a tool call's result (a message, a ``Command``, a list of them)."""
    kind, raw = _SERDE.dumps_typed(result)
    return {"type": kind, "data": base64.b64encode(raw).decode("ascii")}


def load_result(record: dict[str, str]) -> Any:
    """The result :func:`dump_result` recorded."""
    return _SERDE.loads_typed((record["type"], base64.b64decode(record["data"])))


@runtime_checkable
class ToolJournal(Protocol):
    """Durable key → JSON-object records."""

    def get(self, key: str) -> dict[str, Any] | None:
        """The record under ``key``, or ``None``."""
        ...

    def put(self, key: str, record: dict[str, Any]) -> None:
        """Store ``record`` under ``key``, replacing any earlier one."""
        ...


class MemoryToolJournal:
    """A journal in this process's memory: enough when resumes happen in the same process."""

    def __init__(self) -> None:
        self._records: dict[str, str] = {}
        self._lock = threading.Lock()

    def get(self, key: str) -> dict[str, Any] | None:
        """The record under ``key``, or ``None``."""
        with self._lock:
            raw = self._records.get(key)
        return None if raw is None else dict(json.loads(raw))

    def put(self, key: str, record: dict[str, Any]) -> None:
        """Store a copy of ``record`` (as JSON, so it cannot be mutated afterwards)."""
        raw = json.dumps(record)
        with self._lock:
            self._records[key] = raw


class SQLiteToolJournal:
    """A journal in a SQLite file (it may be the checkpointer's file: it uses its own table)."""

    def __init__(self, path: str | os.PathLike[str], *, busy_timeout_s: float = 30.0) -> None:
        self.path = os.fspath(path)
        self._conn = sqlite3.connect(self.path, timeout=busy_timeout_s, check_same_thread=False)
        self._lock = threading.Lock()
        with self._lock, self._conn:
            self._conn.execute(
                "CREATE TABLE IF NOT EXISTS retryctl_tool_journal"
                " (key TEXT PRIMARY KEY, record TEXT NOT NULL)"
            )

    def get(self, key: str) -> dict[str, Any] | None:
        """The record under ``key``, or ``None``."""
        with self._lock:
            row = self._conn.execute(
                "SELECT record FROM retryctl_tool_journal WHERE key = ?", (key,)
            ).fetchone()
        return None if row is None else dict(json.loads(row[0]))

    def put(self, key: str, record: dict[str, Any]) -> None:
        """Store ``record`` under ``key``; committed before this returns."""
        raw = json.dumps(record)
        with self._lock, self._conn:
            self._conn.execute(
                "INSERT OR REPLACE INTO retryctl_tool_journal (key, record) VALUES (?, ?)", (key, raw)
            )

    def close(self) -> None:
        """Close the connection."""
        with self._lock:
            self._conn.close()
