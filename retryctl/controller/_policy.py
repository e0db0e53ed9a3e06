"""The policy: every threshold and limit ``decide`` applies, frozen and validated, each field documented."""

from __future__ import annotations

import math
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from retryctl.controller._signals import DEFAULT_WEIGHTS
from retryctl.controller.stopping import StopRule, parse_policy

__all__ = ["EscalationStep", "Policy"]

EscalationStep = Literal["switch", "refine", "ask_user", "stop"]


class Policy(BaseModel):
    """How a wrapped step turns signals, errors, budgets and breakers into a verdict."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    accept_threshold: float = Field(default=0.8, ge=0.0, le=1.0)
    """Accept the best candidate when its fused confidence is at least this."""
    weights: dict[str, float] = Field(default_factory=lambda: dict(DEFAULT_WEIGHTS))
    """Weight of each named signal in the fused confidence; renormalised over available signals."""
    stopping: str = "default"
    """The stopping rule that decides when enough samples were drawn (a name ``retryctl bench`` knows)."""
    min_samples: int = Field(default=1, ge=1)
    """Samples drawn before the stopping rule is asked."""
    max_samples: int = Field(default=8, ge=1)
    """Samples a step may draw at most per attempt."""
    max_retries: int = Field(default=3, ge=0)
    """Retries of the same target after transient faults before moving on."""
    max_refines: int = Field(default=2, ge=0)
    """Refine rounds (retry with feedback) per step."""
    max_switches: int | None = Field(default=None, ge=0)
    """Switches to another member of the equivalence group per step; ``None``: as many as there are."""
    low_confidence: tuple[EscalationStep, ...] = ("switch", "refine", "ask_user")
    """What to try, in order, when confidence is below the threshold; ``stop`` when none applies."""
    on_budget_exhausted: Literal["stop", "ask_user"] = "stop"
    """``ask_user`` offers to extend the budget (a LangGraph interrupt) instead of stopping."""

    @field_validator("weights")
    @classmethod
    def _weights_are_valid(cls, weights: dict[str, float]) -> dict[str, float]:
        for name, weight in weights.items():
            if not 0 <= weight < math.inf:  # also rejects NaN; an infinite weight fuses to NaN
                raise ValueError(f"weight of {name!r} is {weight!r}; weights must be finite and >= 0")
        if not any(w > 0 for w in weights.values()):
            raise ValueError("at least one signal needs a positive weight")
        return weights

    @field_validator("stopping")
    @classmethod
    def _stopping_is_known(cls, name: str) -> str:
        parse_policy(name)  # raises UnknownPolicyError (a ValueError) naming the known rules
        return name

    def stopping_rule(self) -> StopRule:
        """The stopping rule named by :attr:`stopping`, built fresh."""
        return parse_policy(self.stopping).build()

    @model_validator(mode="after")
    def _min_not_above_max(self) -> Policy:
        if self.min_samples > self.max_samples:
            raise ValueError(f"min_samples={self.min_samples} is greater than max_samples={self.max_samples}")
        return self
