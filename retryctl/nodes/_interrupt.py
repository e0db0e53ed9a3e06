"""``ask_user``: a LangGraph ``interrupt()`` with a JSON payload, and the parsing of the person's reply.

The payload (all JSON) says what the step was asked, the best candidate so far, the evidence of the
verdict, and the options. A run is resumed with ``Command(resume=reply)`` where ``reply`` is one of::

    {"action": "accept"}                          take the best candidate as it is
    {"action": "answer", "answer": "42"}          use this answer instead (a bare string also works)
    {"action": "extend", "budget": {"samples": 4}}  add to the step's budget and try again
    {"action": "stop"}                            end the step with a ``stop`` result

A reply that does not parse is not an error that kills the run: the same interrupt is raised again
with an ``error`` field saying what was wrong, and the run waits for a better reply.

A tool call's payload also names its ``tool_call_id``; ``ControlledToolNode`` puts its calls'
questions one at a time and matches each reply to the call that asked (see ``_tool_ask``).

The reply is logged like any decision: :func:`reply_verdict` turns it into the verdict that ends the
attempt (``accept`` for an accepted or given answer, ``stop``, or ``retry`` for an extension), written
to the decision log with ``extra={"decided_by": "user", "reply": ...}``. So a step's last record always
says how it ended, a person's answer included.
"""

from __future__ import annotations

from typing import Any

from langgraph.types import interrupt
from pydantic import ValidationError

from retryctl.controller import LIMIT_NAMES, Verdict
from retryctl.controller._reply import (
    UserReply,
    parse_reply,
    reply_error,
    reply_extra,
    reply_verdict,
)

__all__ = [
    "ASK_EVENT",
    "UserReply",
    "ask",
    "ask_payload",
    "parse_reply",
    "reply_error",
    "reply_extra",
    "reply_verdict",
]

ASK_EVENT = "retryctl.ask_user"
"""``type`` of every ``ask_user`` interrupt payload."""

_OPTIONS: list[dict[str, Any]] = [
    {"action": "accept", "description": "accept the best candidate as it is"},
    {"action": "answer", "description": "give the answer yourself", "fields": {"answer": "string"}},
    {
        "action": "extend",
        "description": "add to the budget and try again",
        "fields": {"budget": {name: "number" for name in LIMIT_NAMES}},
    },
    {"action": "stop", "description": "end the step with a stop result"},
]


def ask_payload(
    verdict: Verdict,
    *,
    step_id: str,
    question: str,
    best: dict[str, Any] | None,
    tool_call_id: str | None = None,
) -> dict[str, Any]:
    """The JSON payload of an ``ask_user`` interrupt (``tool_call_id`` when a tool call asks)."""
    ids = {} if tool_call_id is None else {"tool_call_id": tool_call_id}
    return {
        "type": ASK_EVENT,
        **ids,
        "step_id": step_id,
        "question": question,
        "reason": verdict.reason,
        "confidence": verdict.confidence,
        "best": best,
        "evidence": verdict.evidence.model_dump(mode="json"),
        "options": _OPTIONS,
    }


def ask(payload: dict[str, Any]) -> UserReply:
    """Interrupt with ``payload`` until the resume value parses as a :class:`UserReply`.

    Must run inside a graph node with a checkpointer. Each bad reply raises a new interrupt (the n-th
    ``interrupt()`` of a node is matched to the n-th resume value, so this is replay-safe when the node
    asks in the same order every time it runs, as ``ControlledStep`` does: one question per node).
    """
    current = payload
    while True:
        raw = interrupt(current)
        try:
            return parse_reply(raw)
        except ValidationError as exc:
            current = {**payload, "error": reply_error(raw, exc)}
