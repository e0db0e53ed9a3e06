"""The embedded default checkpointer: LangGraph's ``SqliteSaver`` on a file.

Any LangGraph checkpointer works with retryctl's graphs (their state is JSON-plain); SQLite is the one
that needs no server, and a run interrupted in one process resumes in another from the same file.
"""

from __future__ import annotations

import os
import sqlite3
from typing import TYPE_CHECKING

from retryctl.exceptions import ConfigError

if TYPE_CHECKING:
    from langgraph.checkpoint.sqlite import SqliteSaver

__all__ = ["sqlite_checkpointer"]


def sqlite_checkpointer(path: str | os.PathLike[str]) -> SqliteSaver:
    """A ``SqliteSaver`` on ``path`` (created if missing), usable from LangGraph's worker threads.

    Needs ``langgraph-checkpoint-sqlite``. It serves sync runs (``invoke``/``stream``); async runs use
    ``langgraph.checkpoint.sqlite.aio.AsyncSqliteSaver`` on the same file. Close it with
    ``saver.conn.close()`` when done, or use ``SqliteSaver.from_conn_string(path)`` as a context
    manager instead.
    """
    try:
        from langgraph.checkpoint.sqlite import SqliteSaver
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ConfigError(
            field="checkpointer",
            value=os.fspath(path),
            problem="SQLite checkpoints need the langgraph-checkpoint-sqlite package",
        ) from exc
    # LangGraph runs sync nodes in worker threads; SqliteSaver serialises access with its own lock.
    conn = sqlite3.connect(os.fspath(path), check_same_thread=False)
    return SqliteSaver(conn)
