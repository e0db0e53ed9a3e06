"""The policy: every threshold and limit ``decide`` applies, frozen and validated, each field documented."""

from __future__ import annotations

import math
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_serializer, field_validator, model_validator

from retryctl.controller._calibration import Calibration
from retryctl.controller._relaxation import Relaxation
from retryctl.controller._signals import DEFAULT_WEIGHTS
from retryctl.controller._token_log import TokenLog
from retryctl.controller.stopping import KNOWN_POLICIES, RuleLike, StopRule, as_rule, parse_stopping_rule

__all__ = ["EscalationStep", "Policy"]

EscalationStep = Literal["switch", "refine", "ask_user", "stop"]


class Policy(BaseModel):
    """How a wrapped step turns signals, errors, budgets and breakers into a verdict."""

    # A rule object is not a pydantic type: it is checked by ``_stopping_is_a_rule``, not by pydantic.
    model_config = ConfigDict(frozen=True, extra="forbid", arbitrary_types_allowed=True)

    accept_threshold: float = Field(default=0.8, ge=0.0, le=1.0)
    """Accept the best candidate when its confidence is at least this: the calibrated confidence (an
    estimate of P(correct)) with a ``calibration``, the raw fused one without."""
    calibration: Calibration | None = None
    """A map from the raw fused confidence to P(correct), fitted on graded outcomes
    (``retryctl calibrate``; ``load_calibration`` reads its file). ``None``: the raw confidence is
    compared with the threshold as it is."""
    weights: dict[str, float] = Field(default_factory=lambda: dict(DEFAULT_WEIGHTS))
    """Weight of each named signal in the fused confidence; renormalised over available signals."""
    stopping: str | RuleLike = "default"
    """The stopping rule that decides when enough samples were drawn: a name ``retryctl bench`` knows
    (``"sc-3"``, ``"esc:8"``), or a rule object, combined with ``&``/``|`` if need be
    (``FixedSamples(n=8) | EscWindow(window=4)``); a plain callable ``(Tally) -> bool`` is wrapped."""
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
    relaxation: Relaxation | None = Relaxation()
    """How a member's grammar constraints relax after each ``refine`` of output decoded under one:
    strictness ``start`` (1.0), times ``factor`` (0.8) per failure, down to ``floor`` (0.3). A member
    with a ladder of grammars (:class:`~retryctl.models.ConstrainedBackend`) decodes under the
    narrowest rung the strictness allows. ``None``: never relax (strictness stays 1.0)."""
    token_log: TokenLog = TokenLog()
    """Which candidates' per-token diagnostics (text, logprob, entropy, top-3 mass) each verdict
    record carries in ``extra.token_samples``, and how many tokens of each: by default every
    candidate's first 64 (``TokenLog(keep="off")`` logs none; docs/audit.md gives the size cost). A
    string ``"off"``, ``"accepted"`` or ``"all"`` is short for ``TokenLog(keep=...)``."""

    @field_validator("weights")
    @classmethod
    def _weights_are_valid(cls, weights: dict[str, float]) -> dict[str, float]:
        for name, weight in weights.items():
            if not 0 <= weight < math.inf:  # also rejects NaN; an infinite weight fuses to NaN
                raise ValueError(f"weight of {name!r} is {weight!r}; weights must be finite and >= 0")
        if not any(w > 0 for w in weights.values()):
            raise ValueError("at least one signal needs a positive weight")
        return weights

    @field_validator("token_log", mode="before")
    @classmethod
    def _token_log_shorthand(cls, value: Any) -> Any:
        # Policy(token_log="off") reads as the knob is named; anything else is TokenLog's to judge.
        return {"keep": value} if isinstance(value, str) else value

    @field_validator("stopping", mode="before")
    @classmethod
    def _stopping_is_a_rule(cls, value: Any) -> str | StopRule:
        # Held as a name or a StopRule (a plain callable is wrapped here, once), so that the rule's
        # name is what records print and ``stopping_rule`` hands out the same object every time.
        if isinstance(value, str):
            parse_stopping_rule(value)  # raises UnknownPolicyError (a ValueError) naming the known rules
            return value
        if isinstance(value, StopRule):
            return value
        if callable(value) and not isinstance(value, type):  # a class is a rule's maker, not a rule
            wrapped = as_rule(value)
            assert isinstance(wrapped, StopRule)  # as_rule wraps every non-StopRule callable
            return wrapped
        if isinstance(value, type):
            got = f"the class {value.__name__}, not a rule (build one: {value.__name__}(...))"
        else:
            got = f"{type(value).__name__} {value!r}"
        raise ValueError(
            f"got {got}; stopping takes a rule name ({', '.join(KNOWN_POLICIES)}) or a "
            "stopping rule: a StopRule such as FixedSamples(n=5) | EscWindow(), or a callable "
            "(Tally) -> bool | StopDecision"
        )

    @field_serializer("stopping", when_used="json")
    def _stopping_as_name(self, value: str | RuleLike) -> str:
        # JSON has no rule objects: a rule is written as its name (e.g. "(sc-8 | esc-4)"), which
        # tells a reader what ran but is not a name ``parse_stopping_rule`` reads back.
        return value if isinstance(value, str) else str(getattr(value, "name", value))

    def stopping_rule(self) -> StopRule:
        """The stopping rule: built fresh from a name, or the rule object itself (rules keep no state
        between calls, so steps may share one)."""
        if isinstance(self.stopping, str):
            return parse_stopping_rule(self.stopping).build()
        rule = self.stopping
        assert isinstance(rule, StopRule)  # ``_stopping_is_a_rule`` wrapped any other callable
        return rule

    @model_validator(mode="after")
    def _min_not_above_max(self) -> Policy:
        if self.min_samples > self.max_samples:
            raise ValueError(f"min_samples={self.min_samples} is greater than max_samples={self.max_samples}")
        return self
