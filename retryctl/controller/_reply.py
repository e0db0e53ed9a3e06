"""A person's reply to an ``ask_user`` verdict, and the verdict it amounts to: plain data, no I/O.

The LangGraph side (the ``interrupt()`` and its payload) is in ``retryctl.nodes``; every driver (the
step, the tool node, the middleware) parses and decides on the reply with these, through
:class:`~retryctl.controller.AttemptEngine`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from retryctl.controller._budget import LIMIT_NAMES
from retryctl.controller._verdict import Action, Evidence, Verdict

__all__ = ["UserReply", "parse_reply", "reply_error", "reply_extra", "reply_verdict"]


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
    """The reply as a :class:`UserReply`; a bare string is an action name or else an answer. A
    ``HumanInTheLoopMiddleware`` decision is read as its counterpart (see :func:`_from_hitl`)."""
    if isinstance(raw, UserReply):
        return raw
    if isinstance(raw, str):
        if raw in ("accept", "stop"):
            return UserReply(action=raw)  # type: ignore[arg-type]  # narrowed by the test above
        return UserReply(action="answer", answer=raw)
    return UserReply.model_validate(_from_hitl(raw))


_HITL_ACTIONS = {"approve": "accept", "respond": "answer", "reject": "stop"}
"""LangChain ``HumanInTheLoopMiddleware`` decision types and the reply actions they mean."""


def _from_hitl(raw: object) -> object:
    """A ``HumanInTheLoopMiddleware`` decision, alone or as ``{"decisions": [decision]}``, as a reply:
    ``approve`` is ``accept``, ``respond`` is ``answer`` (its ``message``), ``reject`` is ``stop``.
    Anything else is returned as it is (``edit`` has no counterpart: it fails to parse, and is put
    again with the error)."""
    if isinstance(raw, Mapping) and isinstance(raw.get("decisions"), list) and len(raw["decisions"]) == 1:
        raw = raw["decisions"][0]
    if isinstance(raw, Mapping) and "action" not in raw and raw.get("type") in _HITL_ACTIONS:
        action = _HITL_ACTIONS[raw["type"]]
        return {"action": action, **({"answer": raw.get("message")} if action == "answer" else {})}
    return raw


def reply_error(raw: object, exc: ValidationError) -> str:
    """The ``error`` field of the question put again after a reply that did not parse."""
    problems = "; ".join(str(e["msg"]) for e in exc.errors())
    return f"could not use the reply {raw!r}: {problems}"


def reply_verdict(reply: UserReply, asked: Verdict) -> Verdict:
    """The verdict a person's ``reply`` to the ``ask_user`` verdict ``asked`` amounts to, for the log.

    ``accept`` keeps the best candidate (its answer and confidence); ``answer`` accepts the person's
    answer, with no confidence (nothing was measured); ``extend`` is a ``retry`` with the larger
    budget; ``stop`` ends the step. The evidence is the one the person decided on, less what the asked
    attempt charged (``budget_charged``): the reply charged nothing, and its record must not count
    that again.
    """
    evidence = _decided_on(asked)
    if reply.action == "accept":
        # A person looked at it: that is a check, though it measured nothing (the confidence stays).
        return asked.model_copy(
            update={
                "action": Action.ACCEPT,
                "reason": f"accepted by the user ({asked.reason})",
                "evidence": evidence,
                "checked": True,
            }
        )
    if reply.action == "answer":
        return Verdict(
            action=Action.ACCEPT,
            reason="answered by the user",
            answer=reply.answer,
            evidence=evidence,
        )
    if reply.action == "extend":
        added = ", ".join(f"{name} +{amount:g}" for name, amount in reply.budget.items())
        return Verdict(
            action=Action.RETRY,
            reason=f"the user extended the budget ({added}); trying again",
            confidence=asked.confidence,
            answer=asked.answer,
            evidence=evidence,
        )
    return asked.model_copy(
        update={
            "action": Action.STOP,
            "reason": f"the user chose to stop ({asked.reason})",
            "evidence": evidence,
        }
    )


def _decided_on(asked: Verdict) -> Evidence:
    evidence = asked.evidence
    return evidence.model_copy(update={"budget_charged": {}}) if evidence.budget_charged else evidence


def reply_extra(reply: UserReply) -> dict[str, Any]:
    """The ``extra`` of the verdict record that logs ``reply``."""
    return {"decided_by": "user", "reply": reply.model_dump(mode="json")}
