"""A ``POST /v1/chat/completions`` body as the gateway reads it, and an adaptive one's ``retryctl`` options.

Only what the gateway itself acts on is checked here: ``model``, ``messages``, ``stream``, ``adaptive`` and
``retryctl`` always; the sampling knobs (``temperature``, ``top_p``, ``n``, ``max_tokens``, ``seed``,
``stop``) when the gateway samples (adaptive, or the embedded model). A proxied request keeps every other
field as the caller sent it, and the upstream judges those, so a parameter the upstream supports is never
refused here. Each refusal is a 400 whose ``param`` names the field (``messages[1].role``,
``retryctl.budget.samples``).
"""

from __future__ import annotations

from typing import Any, Literal

import orjson
from pydantic import BaseModel, ConfigDict, Field, StrictBool, ValidationError, field_validator

from retryctl.controller import (
    AnswerEquivalence,
    Budget,
    Calibration,
    EquivalenceLike,
    Policy,
    extract_answer_is,
    extract_boxed,
    extract_last_line,
    extract_last_number,
    normalise_number,
    normalise_text,
)
from retryctl.gateway._errors import ApiError, from_validation
from retryctl.models import SamplingParams

__all__ = ["AdaptiveOptions", "ChatRequest", "parse_body"]

_ROLES = frozenset({"system", "developer", "user", "assistant", "tool", "function"})

Answer = Literal["auto", "number", "last_line", "text"]

# How each ``answer`` setting reads a candidate's answer (its vote). ``auto`` is the controller's default:
# a \boxed{}, an "answer is", else the last line, compared as a number when it is one.
_EQUIVALENCES: dict[str, EquivalenceLike] = {
    "auto": AnswerEquivalence(),
    "number": AnswerEquivalence(
        extractors=(extract_boxed, extract_answer_is, extract_last_number), normalisers=(normalise_number,)
    ),
    "last_line": AnswerEquivalence(extractors=(extract_last_line,), normalisers=(normalise_text,)),
    "text": normalise_text,
}


_POLICY_NAMES = {"stopping": "policy", "accept_threshold": "threshold"}
"""The :class:`Policy` fields under the names the ``retryctl`` options give them."""


class AdaptiveOptions(BaseModel):
    """The body's ``"retryctl"`` object: how an adaptive request samples and decides."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    policy: str = "default"
    """The stopping rule, by a name ``retryctl bench`` knows (``default``, ``sc-5``, ``esc``, ``ac-beta``)."""
    min_samples: int = Field(default=1, ge=1, le=64)
    """Samples drawn before the stopping rule is first asked."""
    max_samples: int = Field(default=8, ge=1, le=64)
    """Most samples one request draws."""
    threshold: float = Field(default=0.8, ge=0.0, le=1.0)
    """Confidence at or above which the leading answer is accepted: the calibrated one where the
    gateway applies a calibration (``retryctl serve --calibration``), the raw fused one otherwise."""
    answer: Answer = "auto"
    """How a candidate's answer (its vote) is read from its text."""
    budget: Budget = Field(default_factory=Budget)
    """Limits on the whole request: ``samples``, ``input_tokens``, ``output_tokens``, ``wall_s``..."""

    @field_validator("max_samples")
    @classmethod
    def _at_least_min(cls, value: int, info: Any) -> int:
        low = info.data.get("min_samples")
        if low is not None and value < low:
            raise ValueError(f"must be >= min_samples ({low})")
        return value

    def controller_policy(self, calibration: Calibration | None = None) -> Policy:
        """The :class:`~retryctl.controller.Policy` of these options under the gateway's ``calibration``
        (a bad ``policy`` name is a 400)."""
        try:
            return Policy(
                calibration=calibration,
                stopping=self.policy,
                min_samples=self.min_samples,
                max_samples=self.max_samples,
                accept_threshold=self.threshold,
                # One model, one request: no alternatives to switch to, nobody to ask; a low confidence
                # is reported to the caller, who decides.
                low_confidence=("stop",),
            )
        except ValidationError as exc:
            raise from_validation(exc, prefix=("retryctl",), renamed=_POLICY_NAMES) from None

    @property
    def equivalence(self) -> EquivalenceLike:
        """The answer reader of :attr:`answer`."""
        return _EQUIVALENCES[self.answer]


class ChatRequest(BaseModel):
    """The fields of a chat completion request that the gateway acts on (the rest is kept as sent)."""

    model_config = ConfigDict(extra="allow", frozen=True)

    model: str = Field(min_length=1)
    messages: list[dict[str, Any]] = Field(min_length=1)
    stream: StrictBool = False
    adaptive: StrictBool = False
    retryctl: AdaptiveOptions | None = None
    temperature: float | None = Field(default=None, ge=0.0, le=2.0)
    top_p: float | None = Field(default=None, gt=0.0, le=1.0)
    n: int | None = Field(default=None, ge=1, le=128)
    max_tokens: int | None = Field(default=None, ge=1)
    max_completion_tokens: int | None = Field(default=None, ge=1)
    seed: int | None = None
    stop: str | list[str] | None = None

    @property
    def options(self) -> AdaptiveOptions:
        """The adaptive options (defaults when the body has none)."""
        return self.retryctl if self.retryctl is not None else AdaptiveOptions()

    def sampling_params(self, *, default_max_tokens: int) -> SamplingParams:
        """The sampling knobs of this request, OpenAI's defaults where it sets none."""
        stop = (self.stop,) if isinstance(self.stop, str) else tuple(self.stop or ())
        try:
            return SamplingParams(
                temperature=1.0 if self.temperature is None else self.temperature,
                top_p=self.top_p,
                seed=self.seed,
                max_tokens=self.max_completion_tokens or self.max_tokens or default_max_tokens,
                stop=stop,
            )
        except ValueError as exc:  # SamplingParams' own checks (ConfigError names the field)
            field = getattr(exc, "field", None)
            raise ApiError(400, f"invalid request: {exc}", param=field, code="invalid_value") from None

    def check_roles(self) -> None:
        """Refuse a message without a known role, naming it (``messages[1].role``). Checked here, not
        by a pydantic validator: a field validator's error is located at the whole list."""
        for i, message in enumerate(self.messages):
            role = message.get("role")
            if role not in _ROLES:
                param = f"messages[{i}].role"
                raise ApiError(
                    400,
                    f"invalid '{param}': must be one of {sorted(_ROLES)} (got {role!r})",
                    param=param,
                    code="invalid_value",
                )

    def check_adaptive(self) -> None:
        """Refuse what an adaptive request cannot do, naming the field."""
        if not self.adaptive:
            if self.retryctl is not None:
                raise ApiError(
                    400, "'retryctl' options need \"adaptive\": true", param="retryctl", code="invalid_value"
                )
            return
        if self.n not in (None, 1):
            raise ApiError(
                400,
                f"adaptive sampling chooses one answer: 'n' must be 1 (got {self.n}); "
                "set retryctl.max_samples instead",
                param="n",
                code="unsupported_value",
            )
        for field in ("tools", "functions"):
            if (self.model_extra or {}).get(field):
                raise ApiError(
                    400,
                    f"adaptive sampling votes on answer text; '{field}' (tool calls) is not supported",
                    param=field,
                    code="unsupported_parameter",
                )


def parse_body(raw: bytes) -> tuple[dict[str, Any], ChatRequest]:
    """The body as sent (a dict) and as read; a 400 naming the field for anything unusable."""
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise ApiError(400, f"the request body is not valid JSON: {exc}", code="invalid_json") from None
    if not isinstance(body, dict):
        raise ApiError(400, "the request body must be a JSON object", code="invalid_json")
    try:
        request = ChatRequest.model_validate(body)
    except ValidationError as exc:
        raise from_validation(exc) from None
    request.check_roles()
    request.check_adaptive()
    return body, request
