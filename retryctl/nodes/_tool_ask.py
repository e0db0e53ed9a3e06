"""Matching ``ask_user`` replies to the tool calls that asked.

LangGraph matches resume values to the ``interrupt()`` calls of a task by their order: the n-th call
gets the n-th value. A tool node runs a step's calls in a thread pool (or ``asyncio.gather``), so if each
call interrupted by itself, sibling calls could swap answers, and a call resumed at its latest question
(from the journal) would get the answer to its first one. So the calls never interrupt themselves:

- a call that needs the user records its question with the :class:`AskRound` of the node run and
  ends the pass with a placeholder (:func:`waiting`), or takes the reply the round holds for it;
- after a pass with questions, the node puts **one** of them, the first in the model's call order, with
  ``interrupt()`` from its own thread, and runs the calls again once it has the reply;
- the round journals which call (and which of its questions) each ``interrupt()`` of the task was
  about, so a resumed run calls ``interrupt()`` in the same order and each resume value reaches the
  question it answered; a value whose question was dealt with in an earlier run is skipped.

So one question is pending at a time (a plain ``Command(resume=reply)`` answers it, as does
``Command(resume={interrupt.id: reply})``), and its payload names the call (``tool_call_id``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

from langchain_core.messages import ToolMessage
from langgraph.types import interrupt
from pydantic import ValidationError

from retryctl.nodes._interrupt import ASK_EVENT, UserReply, ask, parse_reply, reply_error
from retryctl.nodes._journal import ToolJournal

__all__ = ["AskRound", "call_key", "reply_to", "task_key", "waiting"]

_ROUND: ContextVar[AskRound | None] = ContextVar("retryctl_ask_round", default=None)
"""The round of the node run in progress: set by the node around each pass over its calls, read by the
calls (the pool and ``asyncio.gather`` copy the context into every call)."""


def task_key(config: Mapping[str, Any]) -> str | None:
    """The journal prefix of a node run: its thread and task (``checkpoint_ns``, which names the task:
    the same when LangGraph resumes the step, another for a later step), or ``None`` without a thread."""
    configurable = config.get("configurable") or {}
    thread = configurable.get("thread_id")
    if thread is None:
        return None
    task = configurable.get("checkpoint_ns")
    return f"{thread}/{task}" if task else str(thread)


def call_key(config: Mapping[str, Any], call_id: object) -> str | None:
    """The journal key of one tool call (``None`` without a thread or a call id: nothing can resume)."""
    prefix = task_key(config)
    return None if prefix is None or not call_id else f"{prefix}/{call_id}"


@dataclass(frozen=True)
class _Question:
    asks: int
    """Which question of its call this is (1, 2, ...)."""
    payload: dict[str, Any]


@dataclass
class AskRound:
    """The questions of one run of a tool node and the replies they got (see the module docstring)."""

    journal: ToolJournal
    config: Mapping[str, Any]
    """The node run's config: its thread and task key the round's journal records."""
    order: Sequence[str]
    """The step's tool-call ids in the model's order: the first waiting call is asked first."""
    key: str | None = field(init=False)
    slots: list[tuple[str, int]] = field(init=False)
    """Per ``interrupt()`` of the task, in order: the call and which of its questions it put."""
    waiting: dict[str, _Question] = field(init=False, default_factory=dict)
    replies: dict[str, tuple[int, UserReply]] = field(init=False, default_factory=dict)
    errors: dict[str, str] = field(init=False, default_factory=dict)
    _last: dict[str, Any] | None = field(init=False, default=None)

    def __post_init__(self) -> None:
        ids = "+".join(self.order)
        prefix = task_key(self.config)
        self.key = None if prefix is None or not all(self.order) else f"{prefix}/{ids}/asks"
        record = self.journal.get(self.key) if self.key else None
        self.slots = [(str(c), int(n)) for c, n in record["slots"]] if record else []
        self._last = record["payload"] if record else None

    def replay(self) -> None:
        """Call ``interrupt()`` once per question put in an earlier run, in the same order, and keep the
        reply to a question its call is still waiting on. Raises ``GraphInterrupt`` (the same question
        again) when the latest one has no answer yet."""
        for i, (call, asks) in enumerate(self.slots):
            last = i == len(self.slots) - 1
            raw = interrupt(self._last if last else {"type": ASK_EVENT, "tool_call_id": call})
            if self._still_waiting(call, asks):
                self._take(call, asks, raw)

    def attempt(self) -> _Pass:
        """One pass over the step's calls (a context manager): they see this round while it lasts."""
        self.waiting = {}
        return _Pass(self)

    def ask(self) -> None:
        """Put the first waiting call's question until it has a reply that parses (a bad reply puts it
        again with an ``error`` field). Raises ``GraphInterrupt`` until the person answers."""
        while True:
            call = next((c for c in self.order if c in self.waiting), next(iter(self.waiting)))
            question = self.waiting[call]
            payload = question.payload
            if call in self.errors:
                payload = {**payload, "error": self.errors[call]}
            self.slots.append((call, question.asks))
            if self.key:
                self.journal.put(self.key, {"slots": self.slots, "payload": payload})
            self._take(call, question.asks, interrupt(payload))
            if call in self.replies:
                return

    def reply_for(self, call: str, asks: int, payload: dict[str, Any]) -> UserReply | None:
        """The reply to question ``asks`` of ``call``, or ``None`` (the question waits for the node)."""
        held = self.replies.get(call)
        if held is not None and held[0] == asks:
            del self.replies[call]
            return held[1]
        self.waiting[call] = _Question(asks, payload)
        return None

    def _take(self, call: str, asks: int, raw: object) -> None:
        try:
            reply = parse_reply(raw)
        except ValidationError as exc:
            self.errors[call] = reply_error(raw, exc)
            return
        self.errors.pop(call, None)
        self.replies[call] = (asks, reply)

    def _still_waiting(self, call: str, asks: int) -> bool:
        key = call_key(self.config, call)
        record = self.journal.get(key) if key else None
        return record is not None and record.get("phase") == "ask" and int(record.get("asks", 1)) == asks


class _Pass:
    """:meth:`AskRound.attempt`'s context (a class: it runs on every node pass)."""

    __slots__ = ("_round", "_token")

    def __init__(self, round_: AskRound) -> None:
        self._round = round_

    def __enter__(self) -> None:
        self._token = _ROUND.set(self._round)

    def __exit__(self, *_: object) -> None:
        _ROUND.reset(self._token)


def reply_to(call: str, asks: int, payload: dict[str, Any]) -> UserReply | None:
    """The reply to a tool call's question, or ``None`` when it must wait for the node to ask it.

    Outside a node run (no round) the call asks by itself."""
    current = _ROUND.get()
    if current is None:
        return ask(payload)
    return current.reply_for(call, asks, payload)


def waiting(call: dict[str, Any]) -> ToolMessage:
    """The placeholder a waiting call ends its pass with; the node drops that pass's output."""
    return ToolMessage(
        content="",
        name=call["name"],
        tool_call_id=str(call.get("id") or ""),
        response_metadata={"retryctl": {"status": "waiting"}},
    )
