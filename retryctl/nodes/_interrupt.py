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

from typing import Any, Literal

from langgraph.types import interrupt
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from retryctl.controller import LIMIT_NAMES, Action, Verdict

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


class UserReply(BaseModel):
    """A person's answer to an ``ask_user`` interrupt."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    action: Literal["accept", "answer", "extend", "stop"]
    """What to do next."""
    answer: str | None = None
    """For ``answer``: the answer to use."""
    budget: dict[str, float] = Field(default_factory=dict)
    """For ``extend``: amounts to add to the step's limits, by limit name (``samples``, ``usd``...)."""

    @field_validator("budget")
    @classmethod
    def _known_limits(cls, budget: dict[str, float]) -> dict[str, float]:
        for name, amount in budget.items():
            if name not in LIMIT_NAMES:
                raise ValueError(f"budget names unknown limit {name!r}; known: {', '.join(LIMIT_NAMES)}")
            if not amount > 0:
                raise ValueError(f"budget[{name!r}]={amount!r}: an extension must be > 0")
        return budget

    @model_validator(mode="after")
    def _fields_match_action(self) -> UserReply:
        if self.action == "answer" and not self.answer:
            raise ValueError("action 'answer' needs a non-empty 'answer'")
        if self.action == "extend" and not self.budget:
            raise ValueError("action 'extend' needs a 'budget' such as {'samples': 4}")
        return self


def parse_reply(raw: object) -> UserReply:
    """The reply as a :class:`UserReply`; a bare string is an action name or else an answer."""
    if isinstance(raw, UserReply):
        return raw
    if isinstance(raw, str):
        if raw in ("accept", "stop"):
            return UserReply(action=raw)  # type: ignore[arg-type]  # narrowed by the test above
        return UserReply(action="answer", answer=raw)
    return UserReply.model_validate(raw)


def reply_error(raw: object, exc: ValidationError) -> str:
    """The ``error`` field of the question put again after a reply that did not parse."""
    problems = "; ".join(str(e["msg"]) for e in exc.errors())
    return f"could not use the reply {raw!r}: {problems}"


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


def reply_verdict(reply: UserReply, asked: Verdict) -> Verdict:
    """The verdict a person's ``reply`` to the ``ask_user`` verdict ``asked`` amounts to, for the log.

    ``accept`` keeps the best candidate (its answer and confidence); ``answer`` accepts the person's
    answer, with no confidence (nothing was measured); ``extend`` is a ``retry`` with the larger
    budget; ``stop`` ends the step. The evidence is the one the person decided on.
    """
    if reply.action == "accept":
        return asked.model_copy(
            update={"action": Action.ACCEPT, "reason": f"accepted by the user ({asked.reason})"}
        )
    if reply.action == "answer":
        return Verdict(
            action=Action.ACCEPT,
            reason="answered by the user",
            answer=reply.answer,
            evidence=asked.evidence,
        )
    if reply.action == "extend":
        added = ", ".join(f"{name} +{amount:g}" for name, amount in reply.budget.items())
        return Verdict(
            action=Action.RETRY,
            reason=f"the user extended the budget ({added}); trying again",
            confidence=asked.confidence,
            answer=asked.answer,
            evidence=asked.evidence,
        )
    return asked.model_copy(
        update={"action": Action.STOP, "reason": f"the user chose to stop ({asked.reason})"}
    )


def reply_extra(reply: UserReply) -> dict[str, Any]:
    """The ``extra`` of the verdict record that logs ``reply``."""
    return {"decided_by": "user", "reply": reply.model_dump(mode="json")}
