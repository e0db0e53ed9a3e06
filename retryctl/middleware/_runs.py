"""One ledger per agent run, shared by its model calls and its tool calls.

A middleware instance is shared by every run and thread of the agent it was built into, so it keeps
no run's state on itself: each model call writes the run's record to the agent state
(:data:`RUN_KEY`, a private key that checkpoints keep, so a run resumed after an ``interrupt()``
finds its ledger again); every hook finds the run's :class:`~retryctl.controller.Ledger` by the id in
it here. The book holds the most recent runs only (a run paused at an interrupt that is never resumed
must not hold its ledger forever). A run the book does not hold (resumed in another process, or
forgotten) gets a ledger seeded with the spend its record carries (see ``_carry``).

**Where a run begins.** A run is the agent's work on the user's latest message: the record names that
message's id (its *anchor*), and the first hook whose state's latest user message is another one
opens a new run. A resume adds no user message, so it goes on with the run it paused; a new
``invoke`` on the thread brings one, so it starts afresh. (Opening the run in ``before_agent`` would
say the same with one more graph node, one more Pregel step, on every invocation: about 0.2 ms a
run, ``bench/middleware_overhead.py``; LangGraph tells a node whether it is resuming only through a
private key.) With a checkpointer the new run's id is derived from the thread and the anchor, so a
model call that asks before any record was written (the run's first) meets the same run, and the
spend the journal kept for it, on resume. Without one (nothing can resume) it is a fresh id. A
record without an anchor, an earlier version's, is the run in progress.
"""

from __future__ import annotations

import threading
import uuid
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Annotated, Any, NotRequired

from langchain.agents.middleware.types import AgentState, PrivateStateAttr
from langchain_core.runnables.config import var_child_runnable_config
from langgraph.errors import GraphBubbleUp

from retryctl.controller import Budget, Clock, Ledger
from retryctl.middleware._carry import (
    RunRecord,
    Spend,
    anchor_of,
    journal_key,
    read_record,
    seeded_ledger,
    spend_of,
)
from retryctl.nodes._events import new_run_id, run_id_from_config
from retryctl.nodes._journal import ToolJournal

__all__ = ["RUN_KEY", "RetryControlState", "Run", "RunBook", "latest_user_message", "record_of", "run_of"]

_UNRECORDED = "graph:"
"""The prefix of a run id taken from LangGraph's run (no record in the state). Such an id may name
several agent runs of one thread, so nothing is carried under it."""

_RUN_NAMES = uuid.UUID("5d0c1c1e-58a4-4f4e-9d5c-7b2b8f1f3a10")
"""The namespace of run ids derived from a thread and the user message a run answers."""

RUN_KEY = "retryctl_run"
"""The agent-state key holding the record of the run in progress: its id (its ledger's key) and what
it spent so far (:class:`~retryctl.middleware._carry.RunRecord`)."""


class RetryControlState(AgentState[Any]):
    """The agent state as :class:`~retryctl.middleware.RetryController` extends it."""

    retryctl_run: NotRequired[Annotated[RunRecord | str, PrivateStateAttr]]
    """The record of the run in progress, written after each model call (a bare string: the run's
    id, as checkpoints of earlier versions hold it)."""


def run_of(state: object) -> str:
    """The run id kept in ``state``; without one (a hook before any model call wrote it, say a tool
    call in a graph of one's own) the run LangGraph is in (see ``run_id_from_config``)."""
    found = _found(state)
    run_id = found.get("id") if isinstance(found, Mapping) else found
    # Every hook reads the id; the rest of the record only matters to a run the book does not hold.
    return run_id if isinstance(run_id, str) and run_id else record_of(state)[0]


def record_of(state: object) -> tuple[str, Spend | None]:
    """The run id and the spend its record carries: ``Spend()`` for a bare id (an earlier version's
    record), ``None`` without a record (nothing can be carried). A malformed record is a
    :class:`~retryctl.exceptions.ConfigError` naming the field."""
    run_id, spend = read_record(_found(state))
    if run_id is None:
        return f"{_UNRECORDED}{run_id_from_config()}", None
    return run_id, spend or Spend()


def _found(state: object) -> object:
    return state.get(RUN_KEY) if isinstance(state, Mapping) else getattr(state, RUN_KEY, None)


def latest_user_message(state: object) -> str | None:
    """The id of the newest user (``human``) message in ``state``; ``None`` when it has none with an
    id (LangGraph's ``add_messages`` gives every message in an agent's state one)."""
    messages = state.get("messages") if isinstance(state, Mapping) else getattr(state, "messages", None)
    if not isinstance(messages, list):
        return None
    for message in reversed(messages):
        if getattr(message, "type", None) == "human":
            found = getattr(message, "id", None)
            return found if isinstance(found, str) and found else None
    return None


def _thread() -> str | None:
    config = var_child_runnable_config.get()
    thread = ((config or {}).get("configurable") or {}).get("thread_id")
    return None if thread is None else str(thread)


@dataclass(eq=False)
class Run:
    """One agent run: its ledger, and how many model and tool calls it started."""

    id: str
    ledger: Ledger
    base: Budget = field(default_factory=Budget, repr=False)
    """The budget the run opened under (its ledger's limits are this plus ``extend`` grants)."""
    model_calls: int = 0
    """Model calls started (retries, fallbacks, refines and extra samples each count one)."""
    tool_calls: int = 0
    """Tool calls started (retries and switches each count one)."""
    anchor: str | None = None
    """The id of the user message this run answers (see the module docstring)."""
    paused: bool = False
    """A call of the run was left by an interrupt since its last model call: its sibling calls that
    end after that keep their spend in the journal too (see :meth:`RunBook.saved_at_interrupt`)."""
    views: dict[str, object] = field(default_factory=dict, repr=False)
    """Per-run views of the drivers' settings, bound to this run's ledger (see ``_tools``)."""
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def count(self, kind: str) -> None:
        """Count one started call of ``kind`` (``"model"`` or ``"tool"``)."""
        with self._lock:
            if kind == "model":
                self.model_calls += 1
            else:
                self.tool_calls += 1

    def spend(self) -> Spend:
        """What the run spent so far, as its record carries it."""
        with self._lock:
            calls = {"model_calls": self.model_calls, "tool_calls": self.tool_calls}
        return spend_of(self.ledger, self.base, **calls)

    def record(self) -> RunRecord:
        """The run's record for the agent state (see ``_carry``)."""
        return self.spend().record(self.id, self.anchor)


class RunBook:
    """The ledgers of the runs in progress, by run id; safe to use from many threads at once."""

    def __init__(
        self, budget: Budget, *, clock: Clock, keep: int = 1024, journal: ToolJournal | None = None
    ) -> None:
        self.budget = budget
        self.clock = clock
        self.keep = keep
        self.journal = journal
        """Where :meth:`save` keeps a run's spend when a hook is left by an interrupt."""
        self._runs: OrderedDict[str, Run] = OrderedDict()
        self._lock = threading.Lock()
        self._saving = threading.Lock()

    def open(self) -> Run:
        """A new run, with a fresh ledger."""
        return self.get(new_run_id())

    def get(self, run: str, spent: Spend | None = None) -> Run:
        """The run, opened on first use: a run the book does not hold (resumed in another process,
        or forgotten) opens with a ledger that has already spent ``spent``, the spend carried in
        its record; a run the book holds keeps its own ledger and ``spent`` is not used."""
        with self._lock:
            held = self._runs.get(run)
            if held is None:
                ledger = seeded_ledger(self.budget, self.clock, spent)
                held = Run(run, ledger, base=self.budget)
                if spent is not None:
                    held.model_calls, held.tool_calls = spent.model_calls, spent.tool_calls
                self._runs[run] = held
                while len(self._runs) > self.keep:
                    self._runs.popitem(last=False)
            else:
                self._runs.move_to_end(run)
            return held

    def meet(self, state: object) -> Run:
        """The run of a hook's ``state``: a new one when its latest user message is not the one the
        state's record answers (see the module docstring); else the one the book holds, else one
        opened with the larger of the spend its state record carries and the journal's record of it."""
        found = _found(state)
        anchor = latest_user_message(state)
        if anchor is not None and (found is None or anchor_of(found) not in (anchor, None)):
            return self._begun(anchor)
        held = self.find(run_of(state))
        if held is not None:
            return held
        run, spent = record_of(state)
        if spent is not None:  # the journal is read outside the book's lock: it may be a file
            spent = spent.merged(self._journaled(run))
        return self.get(run, spent)

    def _begun(self, anchor: str) -> Run:
        """The run that answers the user message ``anchor``, opened by the first hook that meets it."""
        thread = _thread()
        if thread is None:  # no checkpointer: nothing can resume, so every meeting is the first
            run = self.open()
        else:
            run_id = str(uuid.uuid5(_RUN_NAMES, f"{thread}\n{anchor}"))
            held = self.find(run_id)
            run = held if held is not None else self.get(run_id, self._journaled(run_id))
        run.anchor = anchor
        return run

    def save(self, run: Run) -> None:
        """Keep ``run``'s spend in the journal: a hook is being left by an interrupt, and the node
        that interrupts writes nothing to the state."""
        if self.journal is None or run.id.startswith(_UNRECORDED):
            return
        run.paused = True  # before the snapshot: a sibling that ends after this one saves again
        with self._saving:  # parallel tool calls that all ask: the journal keeps the largest
            spend = run.spend().merged(self._journaled(run.id))
            self.journal.put(journal_key(run.id), dict(spend.record(run.id)))

    def saved_at_interrupt(self, run: Run) -> _SavedAtInterrupt:
        """Around a hook's work (a context manager): :meth:`save` the run if an interrupt
        (``GraphBubbleUp``) leaves it, or if another call of the run was interrupted since its last
        model call (parallel tool calls are tasks of one step: those that end after the question are
        kept by the checkpoint, and their spend must be kept too)."""
        return _SavedAtInterrupt(self, run)

    def _journaled(self, run: str) -> Spend | None:
        if self.journal is None:
            return None
        key = journal_key(run)
        return read_record(self.journal.get(key), where=f"journal[{key!r}]")[1]

    def find(self, run: str) -> Run | None:
        """The run if the book holds it, without opening one (it counts as used, for ``keep``)."""
        with self._lock:
            held = self._runs.get(run)
            if held is not None:
                self._runs.move_to_end(run)
            return held


class _SavedAtInterrupt:
    """:meth:`RunBook.saved_at_interrupt`'s context (a class, not a generator: it wraps every hook)."""

    __slots__ = ("_book", "_run")

    def __init__(self, book: RunBook, run: Run) -> None:
        self._book = book
        self._run = run

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: type[BaseException] | None, *_: object) -> None:
        # Saved when an interrupt leaves the hook, or when it ends while the run is paused; not when
        # another error leaves it.
        if (kind is None and self._run.paused) or (kind is not None and issubclass(kind, GraphBubbleUp)):
            self._book.save(self._run)
