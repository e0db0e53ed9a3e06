"""The verdict: what the controller decided for one step, why, and on what evidence."""

from __future__ import annotations

from enum import StrEnum
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["Action", "Evidence", "Verdict"]


class Action(StrEnum):
    """The six ways a wrapped step can end."""

    ACCEPT = "accept"
    """The best candidate is good enough: use it."""
    REFINE = "refine"
    """Try again with feedback that names the failed check."""
    RETRY = "retry"
    """The same call again after a backoff: the fault was transient."""
    SWITCH = "switch"
    """Another tool or model of the same equivalence group."""
    ASK_USER = "ask_user"
    """Escalate to a person (a LangGraph interrupt)."""
    STOP = "stop"
    """Circuit breaker: a budget is spent (or the next call's estimate would exceed it), a breaker is
    open or nothing is left to try."""


class Evidence(BaseModel):
    """Everything a verdict was decided on, kept visible component by component."""

    model_config = ConfigDict(frozen=True)

    signals: dict[str, float] = Field(default_factory=dict)
    """Named signals in [0, 1] (``token_confidence``, ``agreement``, ``verifier``, ``validators``...)."""
    weights: dict[str, float] = Field(default_factory=dict)
    """The weight each signal had in the fused confidence (0 for a signal that was unavailable)."""
    thresholds: dict[str, float] = Field(default_factory=dict)
    """The thresholds the policy compared against."""
    budget_used: dict[str, float] = Field(default_factory=dict)
    """Ledger totals at decision time, by limit name."""
    budget_limit: dict[str, float | None] = Field(default_factory=dict)
    """Ledger limits by name; ``None`` means the limit is off."""
    budget_scope: Literal["step", "run"] | None = None
    """Whose ledger ``budget_used`` and ``budget_limit`` are: ``step``, the step's own (its totals are
    what this step spent, over its attempts so far); ``run``, a ledger the step shares with the other
    steps of its run (the run's totals: what every step charged so far). ``None``: not said."""
    budget_charged: dict[str, float] = Field(default_factory=dict)
    """What this verdict's attempt charged to that ledger, by limit name (the names it did not charge
    left out): given with ``budget_scope``, it is what an audit counts (of a ``run`` ledger, the step's
    share of the totals)."""
    breakers: dict[str, str] = Field(default_factory=dict)
    """Breaker state by key: ``closed``, ``open`` or ``half_open``."""
    error_class: str | None = None
    """The class of the error that triggered this verdict, if any (``transient``, ``validation``...)."""
    stopping: dict[str, Any] = Field(default_factory=dict)
    """What the stopping rule said: ``stop``, ``confidence``, ``reason``, ``rule``."""
    notes: list[str] = Field(default_factory=list)
    """Degradations and other facts worth explaining (e.g. "verifier timed out; fused without it")."""


class Verdict(BaseModel):
    """One decision: an action, a sentence a person can read, the fused confidence and the evidence."""

    model_config = ConfigDict(frozen=True)

    action: Action
    reason: str
    confidence: float | None = Field(default=None, ge=0.0, le=1.0)
    """Fused confidence in [0, 1] of the best candidate, when candidates exist and a check ran on them
    (NaN is refused); ``None`` for an unchecked verdict (see :attr:`checked`)."""
    checked: bool = True
    """``False`` when the verdict judged a result on which no check ran: no agreement of two samples or
    more, no validator, verifier, token confidence or tests, only that the call returned. Such a verdict
    claims no confidence and its reason says so ("accepted unchecked: ..."). ``True`` otherwise, also
    for verdicts on an error, a budget or a person's reply, which judge no result."""
    answer: str | None = None
    """The best candidate's canonical answer, when there is one."""
    switch_to: str | None = None
    """For ``switch``: the tool or model to switch to (for ``ask_user`` to extend a budget that could
    not pay for a switch: the switch an extension makes)."""
    feedback: str | None = None
    """For ``refine``: the message for the model, naming the failed check and its evidence (for
    ``ask_user`` to extend a budget that could not pay for a refine: the refine an extension makes)."""
    retry_after_s: float | None = Field(default=None, ge=0.0, allow_inf_nan=False)
    """For ``retry``: the delay the fault asked for (``Retry-After``), if any."""
    evidence: Evidence = Field(default_factory=Evidence)

    def __str__(self) -> str:
        conf = "" if self.confidence is None else f" (confidence {self.confidence:.2f})"
        return f"{self.action.value}{conf}: {self.reason}"
