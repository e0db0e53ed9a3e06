"""Records a node pass writes once the pass is over: its verdicts, then its calls' final results.

A finished call's final result goes to the journal so that a *re-run* of the node (LangGraph resuming
it after an interrupt) returns it instead of calling again. Within one pass nothing may read it back:
a caller's ``wrap_tool_call`` that runs ``execute`` twice for one call (its own retry) must get two
real runs, not the first one's journaled result. So :class:`~retryctl.nodes.ControlledToolNode`
collects a pass's writes (:func:`deferring`) and makes them when the pass ends, whether it returned or
raised, before it asks the user anything, in the node's own thread (not ToolNode's worker thread). The
order is kept: the log records first, then the journal's, so a journaled final result always has its
verdicts in the log, and a crash in between loses both (the step then runs again). The pass's spans end
last (:class:`~retryctl.telemetry._tracing.held_ends`, at the times their calls ended): a record's hash,
known once it is written, goes on its attempt span first.

Written at once, never deferred: a non-idempotent tool's result (the journal's guard against running it
twice), and everything outside a node pass (the ``create_agent`` middleware, a call wrapped by hand).
"""

from __future__ import annotations

from collections.abc import Callable
from contextvars import ContextVar
from typing import Any

from retryctl.audit import DecisionLog
from retryctl.nodes._journal import ToolJournal
from retryctl.telemetry._tracing import held_ends

__all__ = ["DeferredLog", "deferring", "put_later"]

_PENDING: ContextVar[tuple[list[Callable[[], Any]], list[Callable[[], Any]]] | None] = ContextVar(
    "retryctl_tool_pending", default=None
)
"""The pass in progress: (log writes, journal writes). The pool and ``asyncio.gather`` copy the context
into every call, so the calls append to the lists of the pass that started them."""


class deferring:  # lower case: used as a function, ``with deferring():``
    """One node pass: the writes its calls make wait for its end, then run in this thread, in order.
    (A class, not a ``contextmanager`` generator: it runs on every node pass, and costs a third.)"""

    __slots__ = ("_ends", "_pending", "_token")

    def __enter__(self) -> None:
        self._pending: tuple[list[Callable[[], Any]], list[Callable[[], Any]]] = ([], [])
        self._token = _PENDING.set(self._pending)
        # The pass's spans end with it, after its records: each record's hash goes on its span first.
        self._ends = held_ends()
        self._ends.__enter__()

    def __exit__(self, *_: object) -> None:
        _PENDING.reset(self._token)
        logs, puts = self._pending
        try:
            for write in logs:
                write()
            for write in puts:
                write()
        finally:
            self._ends.__exit__()


class DeferredLog:
    """A decision log whose ``record_verdict`` and ``append_verdict`` wait for the end of the pass,
    when there is one."""

    def __init__(self, log: DecisionLog) -> None:
        self.log = log

    def record_verdict(self, verdict: Any, **fields: Any) -> dict[str, Any]:
        """Append the record now, or at the end of the pass (then the record is not returned: ``{}``)."""
        pending = _PENDING.get()
        if pending is None:
            return self.log.record_verdict(verdict, **fields)
        pending[0].append(lambda: self.log.record_verdict(verdict, **fields))
        return {}

    def append_verdict(self, verdict: Any, **fields: Any) -> str | None:
        """Append the record now and return its hash, or at the end of the pass (``None``: its hash is
        not known yet)."""
        pending = _PENDING.get()
        if pending is None:
            return self.log.append_verdict(verdict, **fields)
        pending[0].append(lambda: self.log.append_verdict(verdict, **fields))
        return None

    def append_then(self, verdict: Any, then: Callable[[str], Any] | None, **fields: Any) -> str | None:
        """:meth:`append_verdict`, and when the record waits for the end of the pass, ``then(hash)``
        once it is written."""
        pending = _PENDING.get()
        if pending is None:
            return self.log.append_verdict(verdict, **fields)

        def write() -> None:
            digest = self.log.append_verdict(verdict, **fields)
            if then is not None:
                then(digest)

        pending[0].append(write)
        return None

    def deferring(self) -> bool:
        """Whether a record appended now waits for the end of a pass."""
        return _PENDING.get() is not None


def put_later(journal: ToolJournal, key: str, record: dict[str, Any]) -> None:
    """``journal.put(key, record)`` now, or at the end of the pass (after its log records)."""
    pending = _PENDING.get()
    if pending is None:
        journal.put(key, record)
    else:
        pending[1].append(lambda: journal.put(key, record))
