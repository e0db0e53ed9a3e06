"""A ``POST /v1/chat/completions`` body as the gateway reads it, and an adaptive one's ``retryctl`` options.

Checked for every request, in every mode, as the OpenAI API checks them: ``model``, ``stream``, the
sampling knobs (``temperature``, ``top_p``, ``n``, ``max_tokens``, ``seed``, ``stop``) and OpenAI's other
fields by their type (no coercion: ``"0.5"`` is not a number), every message by the rules of its role
(:mod:`._messages`), the output fields by OpenAI's rules (:mod:`._fields`: ``top_logprobs`` needs
``logprobs``, ``response_format``'s type and ``json_schema``, ``tool_choice`` only with ``tools``), and
the gateway's own ``adaptive`` and ``retryctl``. A proxied request keeps its body
as the caller sent it and the upstream judges the values of the fields the gateway does not act on, so an
upstream's own extensions (llama.cpp's ``top_k``) are never refused here. Each refusal is a 400 whose
``param`` names the field (``messages[1].role``, ``retryctl.budget.samples``).
"""

from __future__ import annotations

from typing import Any, Literal

import orjson
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    StrictFloat,
    StrictInt,
    StrictStr,
    ValidationError,
    field_validator,
)

from retryctl.controller import (
    AnswerEquivalence,
    Budget,
    Calibration,
    EquivalenceLike,
    Policy,
    TokenLog,
    extract_answer_is,
    extract_boxed,
    extract_last_line,
    extract_last_number,
    normalise_number,
    normalise_text,
)
from retryctl.gateway._errors import ApiError, from_validation
from retryctl.gateway._fields import check_output_fields
from retryctl.gateway._messages import check_messages
from retryctl.models import SamplingParams

__all__ = ["AdaptiveOptions", "ChatRequest", "parse_body"]

Answer = Literal["auto", "number", "last_line", "text", "json"]


def _json_value(text: str) -> str | None:
    """A JSON answer's vote: its value, keys sorted and spacing dropped (two spellings of one object
    agree); text that is not JSON is read as ``text`` reads it."""
    try:
        return orjson.dumps(orjson.loads(text), option=orjson.OPT_SORT_KEYS).decode()
    except (orjson.JSONDecodeError, TypeError):
        return normalise_text(text)


# How each ``answer`` setting reads a candidate's answer (its vote). ``auto`` is the controller's default:
# a \boxed{}, an "answer is", else the last line, compared as a number when it is one.
_EQUIVALENCES: dict[str, EquivalenceLike] = {
    "auto": AnswerEquivalence(),
    "number": AnswerEquivalence(
        extractors=(extract_boxed, extract_answer_is, extract_last_number), normalisers=(normalise_number,)
    ),
    "last_line": AnswerEquivalence(extractors=(extract_last_line,), normalisers=(normalise_text,)),
    "text": normalise_text,
    # The default under a JSON response_format: "auto" would read the last line of a spread-out object,
    # a lone "}" on which every sample agrees.
    "json": _json_value,
}


_POLICY_NAMES = {"stopping": "policy", "accept_threshold": "threshold"}
"""The :class:`Policy` fields under the names the ``retryctl`` options give them."""


class AdaptiveOptions(BaseModel):
    """The body's ``"retryctl"`` object: how an adaptive request samples and decides."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    policy: StrictStr = "default"
    """The stopping rule, by a name ``retryctl bench`` knows (``default``, ``sc-5``, ``esc``, ``ac-beta``)."""
    min_samples: StrictInt = Field(default=1, ge=1, le=64)
    """Samples drawn before the stopping rule is first asked."""
    max_samples: StrictInt = Field(default=8, ge=1, le=64)
    """Most samples one request draws."""
    threshold: StrictFloat = Field(default=0.8, ge=0.0, le=1.0)
    """Confidence at or above which the leading answer is accepted: the calibrated one where the
    gateway applies a calibration (``retryctl serve --calibration``), the raw fused one otherwise."""
    answer: Answer = "auto"
    """How a candidate's answer (its vote) is read from its text (``auto`` is ``json`` under a JSON
    ``response_format``)."""
    budget: Budget = Field(default_factory=Budget)
    """Limits on the whole request: ``samples``, ``input_tokens``, ``output_tokens``, ``wall_s``..."""

    @field_validator("max_samples")
    @classmethod
    def _at_least_min(cls, value: int, info: Any) -> int:
        low = info.data.get("min_samples")
        if low is not None and value < low:
            raise ValueError(f"must be >= min_samples ({low})")
        return value

    def controller_policy(
        self, calibration: Calibration | None = None, token_log: TokenLog | None = None
    ) -> Policy:
        """The :class:`~retryctl.controller.Policy` of these options under the gateway's ``calibration``
        and ``token_log`` (``None``: the policy's default); a bad ``policy`` name is a 400."""
        try:
            return Policy(
                calibration=calibration,
                token_log=token_log or TokenLog(),
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

    model: StrictStr = Field(min_length=1)
    messages: list[dict[str, Any]] = Field(min_length=1)
    """Each checked by its role (:mod:`._messages`), kept as sent."""
    stream: StrictBool = False
    adaptive: StrictBool = False
    retryctl: AdaptiveOptions | None = None
    temperature: StrictFloat | None = Field(default=None, ge=0.0, le=2.0)
    top_p: StrictFloat | None = Field(default=None, gt=0.0, le=1.0)
    n: StrictInt | None = Field(default=None, ge=1, le=128)
    max_tokens: StrictInt | None = Field(default=None, ge=1)
    max_completion_tokens: StrictInt | None = Field(default=None, ge=1)
    seed: StrictInt | None = None
    stop: StrictStr | list[StrictStr] | None = None
    # OpenAI's other fields, checked for their type only (the upstream judges their values; its own
    # extensions, e.g. llama.cpp's ``top_k``, pass untouched).
    presence_penalty: StrictFloat | None = None
    frequency_penalty: StrictFloat | None = None
    logit_bias: dict[str, StrictFloat] | None = None
    logprobs: StrictBool | None = None
    top_logprobs: StrictInt | None = None
    user: StrictStr | None = None
    tools: list[dict[str, Any]] | None = None
    tool_choice: StrictStr | dict[str, Any] | None = None
    parallel_tool_calls: StrictBool | None = None
    functions: list[dict[str, Any]] | None = None
    function_call: StrictStr | dict[str, Any] | None = None
    response_format: dict[str, Any] | None = None
    stream_options: dict[str, Any] | None = None

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
            if getattr(self, field):
                raise ApiError(
                    400,
                    f"adaptive sampling votes on answer text; '{field}' (tool calls) is not supported",
                    param=field,
                    code="unsupported_parameter",
                )


def parse_body(raw: bytes, *, text_model: bool = False) -> tuple[dict[str, Any], ChatRequest]:
    """The body as sent (a dict) and as read; a 400 naming the field for anything unusable.
    ``text_model``: the gateway answers from a text model itself (embedded), so only text parts are
    read; an adaptive request's samples are read the same way wherever they come from."""
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
    check_messages(request.messages, text_only=text_model or request.adaptive)
    check_output_fields(body)  # OpenAI's rules, in every mode: a proxied body meets them too
    request.check_adaptive()
    return body, request
