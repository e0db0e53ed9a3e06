"""What a backend is asked (:class:`SamplingParams`) and what it returns (:class:`Candidate`)."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from retryctl.exceptions import ConfigError
from retryctl.models._grammar import Grammar
from retryctl.models._stages import Stage, StageOutcome, check_stages

__all__ = [
    "CUT_WINDOW",
    "Candidate",
    "Constraint",
    "SamplingParams",
    "TokenLogprob",
    "ToolCall",
    "ToolSpec",
    "Usage",
]

CUT_WINDOW = 16
"""Tokens over which ``SamplingParams.cut_below`` is checked (the stopping rules' ``GROUP_WINDOW``)."""

Constraint = Literal["strict", "lenient", "none"]
"""How a structured answer was constrained: the full JSON schema, any JSON, or not at all."""

_RESPONSE_FORMATS = ("text", "json_object", "json_schema")


@dataclass(frozen=True, kw_only=True)
class ToolSpec:
    """A tool the model may call, in the terms of the OpenAI function-calling API."""

    name: str
    """The function name the model must use."""
    description: str = ""
    """What the tool does, shown to the model."""
    parameters: Mapping[str, Any] = field(default_factory=lambda: {"type": "object", "properties": {}})
    """A JSON schema of the arguments object."""

    def __post_init__(self) -> None:
        if not self.name or not self.name.replace("_", "").replace("-", "").isalnum():
            raise ConfigError(field="tools.name", value=self.name, problem="must be [A-Za-z0-9_-]+")
        if not isinstance(self.parameters, Mapping):
            raise ConfigError(
                field=f"tools[{self.name}].parameters",
                value=self.parameters,
                problem="must be a JSON-schema object",
            )

    @classmethod
    def coerce(cls, tool: ToolSpec | Mapping[str, Any]) -> ToolSpec:
        """Accept a ToolSpec, an OpenAI ``{"type": "function", "function": {...}}`` or a flat dict."""
        if isinstance(tool, ToolSpec):
            return tool
        if not isinstance(tool, Mapping):
            raise ConfigError(field="tools", value=tool, problem="each tool must be a dict or ToolSpec")
        spec = tool.get("function", tool)
        if not isinstance(spec, Mapping) or "name" not in spec:
            raise ConfigError(field="tools", value=tool, problem="a tool needs a 'name'")
        return cls(
            name=str(spec["name"]),
            description=str(spec.get("description", "")),
            parameters=spec.get("parameters") or {"type": "object", "properties": {}},
        )

    def to_openai(self) -> dict[str, Any]:
        """The tool in the OpenAI request shape."""
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": dict(self.parameters),
            },
        }


@dataclass(frozen=True, kw_only=True)
class SamplingParams:
    """How to sample. ``None`` leaves a knob at the backend's default; every value is checked here."""

    temperature: float = 1.0
    """Softmax temperature; 0 is greedy decoding."""
    top_p: float | None = None
    """Nucleus sampling mass in (0, 1]."""
    top_k: int | None = None
    """Keep only the k most likely tokens (sent only to servers that take it, e.g. llama.cpp, vLLM)."""
    min_p: float | None = None
    """Drop tokens less likely than ``min_p`` × the top token's probability, in [0, 1]."""
    seed: int | None = None
    """Base seed; the i-th of k samples uses ``seed + i`` where the backend draws them one by one."""
    max_tokens: int = 512
    """Most tokens to generate per candidate."""
    tools: tuple[ToolSpec, ...] = ()
    """Tools the model may call (a dict in the OpenAI shape is accepted and converted)."""
    response_format: Mapping[str, Any] | None = None
    """OpenAI shape: ``{"type": "json_object"}`` or ``{"type": "json_schema", "json_schema": {...}}``."""
    stop: tuple[str, ...] = ()
    """Strings that end a candidate (not included in its text)."""
    logprobs: bool = True
    """Ask for per-token logprobs (the token-confidence signal needs them)."""
    top_logprobs: int = 5
    """How many alternatives to report per token, 0 to 20."""
    cut_below: float | None = None
    """Stop a candidate once the geometric-mean probability of its last ``CUT_WINDOW`` tokens falls
    below this (in (0, 1)); it comes back with ``finish_reason="cut"`` and the tokens it spent. A
    stopping rule sets it from the first samples (samples cut short). The embedded backend stops
    decoding, the OpenAI-compatible one streams the sample and closes the stream; backends that cannot
    watch their tokens as they come (LangChain's) ignore it. Needs ``logprobs``."""
    grammar: Grammar | None = None
    """Decode under this constraint where the backend can (the embedded model, llama.cpp-style
    servers); a backend that cannot says so in the candidate's notes and the check runs after decoding
    as it always does. A grammar replaces ``response_format``'s own constraint while it is in force."""
    strictness: float = 1.0
    """How strictly a member holds its output to its checks' grammars, in (0, 1]: the policy's
    relaxation schedule lowers it after each failure, and a member with a ladder of grammars
    (:func:`~retryctl.models.rung_for`) decodes under the narrowest rung still allowed. Backends
    without a ladder ignore it."""
    stages: tuple[Stage, ...] = ()
    """Decode each sample in these stages (:class:`~retryctl.models.Stage`), one request per stage, each
    continuing the text so far with the stage's own knobs over these; ``max_tokens`` then gives way to
    the stages' caps (see :attr:`token_cap`), and ``stop`` applies to the last stage. ``()``: one request."""

    def __post_init__(self) -> None:
        # Sequences are accepted for convenience and frozen into tuples.
        object.__setattr__(self, "tools", tuple(ToolSpec.coerce(t) for t in self.tools))
        object.__setattr__(self, "stages", check_stages(self.stages))
        stop = (self.stop,) if isinstance(self.stop, str) else tuple(self.stop)
        object.__setattr__(self, "stop", stop)
        self._check_range("temperature", self.temperature, 0.0, 5.0)
        if self.top_p is not None and not (0.0 < self.top_p <= 1.0):
            raise ConfigError(field="top_p", value=self.top_p, problem="must be in (0, 1]")
        if self.top_k is not None and self.top_k < 1:
            raise ConfigError(field="top_k", value=self.top_k, problem="must be at least 1")
        if self.min_p is not None:
            self._check_range("min_p", self.min_p, 0.0, 1.0)
        if self.seed is not None and not (0 <= self.seed < 2**31):
            raise ConfigError(field="seed", value=self.seed, problem="must be in [0, 2**31)")
        if self.max_tokens < 1:
            raise ConfigError(field="max_tokens", value=self.max_tokens, problem="must be >= 1")
        if not (0 <= self.top_logprobs <= 20):
            raise ConfigError(field="top_logprobs", value=self.top_logprobs, problem="must be 0..20")
        if self.cut_below is not None and not (0.0 < self.cut_below < 1.0):
            raise ConfigError(field="cut_below", value=self.cut_below, problem="must be in (0, 1)")
        if any(not isinstance(s, str) or not s for s in stop):
            raise ConfigError(field="stop", value=self.stop, problem="must be non-empty strings")
        self._check_response_format()
        if not (0.0 < self.strictness <= 1.0) or math.isnan(self.strictness):
            raise ConfigError(field="strictness", value=self.strictness, problem="must be in (0, 1]")
        if self.grammar is not None and not isinstance(self.grammar, Grammar):
            raise ConfigError(field="grammar", value=self.grammar, problem="must be a retryctl Grammar")

    @staticmethod
    def _check_range(name: str, value: float, low: float, high: float) -> None:
        if not (low <= value <= high) or math.isnan(value):
            raise ConfigError(field=name, value=value, problem=f"must be in [{low:g}, {high:g}]")

    def _check_response_format(self) -> None:
        fmt = self.response_format
        if fmt is None:
            return
        kind = fmt.get("type") if isinstance(fmt, Mapping) else None
        if kind not in _RESPONSE_FORMATS:
            raise ConfigError(
                field="response_format", value=fmt, problem=f"type must be one of {_RESPONSE_FORMATS}"
            )
        if kind == "json_schema":
            spec = fmt.get("json_schema")
            if not isinstance(spec, Mapping) or not isinstance(spec.get("schema"), Mapping):
                raise ConfigError(
                    field="response_format.json_schema",
                    value=spec,
                    problem="must be a dict with a 'schema' dict",
                )

    @property
    def token_cap(self) -> int:
        """The most tokens one candidate can generate: the sum of the stages' caps, else ``max_tokens``."""
        return sum(s.max_tokens for s in self.stages) if self.stages else self.max_tokens

    @property
    def json_schema(self) -> Mapping[str, Any] | None:
        """The JSON schema an answer must follow, if ``response_format`` gives one."""
        fmt = self.response_format
        if fmt is None or fmt.get("type") != "json_schema":
            return None
        schema: Mapping[str, Any] = fmt["json_schema"]["schema"]
        return schema

    @property
    def wants_json(self) -> bool:
        """Whether the answer must be a JSON value (a JSON response format)."""
        return self.response_format is not None and self.response_format.get("type") != "text"


@dataclass(frozen=True)
class Usage:
    """Tokens billed. Summing the usage of every candidate of a call gives the call's total."""

    input_tokens: int = 0
    """Prompt tokens."""
    output_tokens: int = 0
    """Generated tokens."""

    def __add__(self, other: Usage) -> Usage:
        return Usage(self.input_tokens + other.input_tokens, self.output_tokens + other.output_tokens)

    @property
    def total_tokens(self) -> int:
        """Input plus output."""
        return self.input_tokens + self.output_tokens


@dataclass(frozen=True)
class TokenLogprob:
    """One generated token, its natural-log probability and, when known, the most likely alternatives."""

    token: str
    """The token's text (may be a fragment of a multi-byte character)."""
    logprob: float
    """``log p(token)`` under the model's own distribution (before sampling filters)."""
    top: tuple[tuple[str, float], ...] = ()
    """The most likely tokens at this position with their logprobs, most likely first."""
    entropy: float | None = None
    """The entropy (nats) of the model's whole distribution at this position, where the backend sees
    it (the embedded model); ``None`` elsewhere (an estimate from ``top`` is then all there is)."""


def writable_text(text: str) -> str:
    """``text`` with every lone surrogate replaced by U+FFFD.

    A JSON escape such as ``\\ud800`` decodes to a lone surrogate, which is no character and cannot be
    written as UTF-8: left in a candidate, it would fail the decision log's write mid-graph. Valid pairs
    were already joined by the JSON decoder, so whatever surrogate is left is lone.
    """
    try:
        text.encode()
    except UnicodeEncodeError:
        return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
    return text


@dataclass(frozen=True)
class ToolCall:
    """A call the model asked for. ``arguments_json`` is the model's text; :meth:`arguments` parses it."""

    name: str
    """The tool's name."""
    arguments_json: str
    """The arguments as the model wrote them (JSON text, which may be invalid)."""
    id: str = ""
    """The call id, when the backend gives one."""

    def __post_init__(self) -> None:
        # Every backend's model text passes here (see writable_text).
        object.__setattr__(self, "name", writable_text(self.name))
        object.__setattr__(self, "arguments_json", writable_text(self.arguments_json))

    def arguments(self) -> dict[str, Any]:
        """The arguments as a dict; ``ValueError`` if the model's JSON is not an object."""
        value = json.loads(self.arguments_json)
        if not isinstance(value, dict):
            raise ValueError(f"tool {self.name!r} arguments are not a JSON object: {value!r}")
        return value


@dataclass(frozen=True, kw_only=True)
class Candidate:
    """One sampled answer with everything the controller measures it by."""

    text: str
    """The answer's text (empty when the model only called tools)."""
    model: str
    """The model that produced it (backend-qualified, e.g. ``"embedded:SmolLM2-135M-Instruct"``)."""
    tool_calls: tuple[ToolCall, ...] = ()
    """Tool calls the model asked for."""
    logprobs: tuple[TokenLogprob, ...] | None = None
    """Per-token logprobs, ``None`` when the backend gave none."""
    finish_reason: str | None = None
    """``stop``, ``length``, ``tool_calls``... as the backend reported it."""
    usage: Usage = field(default_factory=Usage)
    """Tokens attributed to this candidate (see :class:`Usage`)."""
    latency_ms: float = 0.0
    """Wall time of the call that produced it, in milliseconds."""
    seed: int | None = None
    """The seed it was sampled with, when known."""
    temperature: float | None = None
    """The temperature it was sampled at, when it differs from the one asked for (a member that
    decodes at its own temperature says so); ``None``: the one asked for."""
    answer: str | None = None
    """An answer already extracted by the source (a sample bank's ``answer``), else ``None``."""
    constraint: Constraint | None = None
    """How its structure was constrained, for structured answers and tool calls."""
    notes: tuple[str, ...] = ()
    """Facts worth logging (e.g. a grammar relaxed from strict to lenient)."""
    grammar: str | None = None
    """The name of the :class:`~retryctl.models.Grammar` it was decoded under, ``None`` when no
    grammar shaped it (none asked, or the backend could not honour it: its notes say which)."""
    stages: tuple[StageOutcome, ...] = ()
    """What each stage produced, when it was sampled in stages (``text`` is then all stages' text,
    ``logprobs`` theirs in order, and ``finish_reason`` the last stage's)."""

    def __post_init__(self) -> None:
        # Every backend's answers pass here (see writable_text).
        object.__setattr__(self, "text", writable_text(self.text))
        if self.answer is not None:
            object.__setattr__(self, "answer", writable_text(self.answer))

    @property
    def token_logprobs(self) -> tuple[float, ...] | None:
        """Just the logprob of each generated token, as the confidence signals take them."""
        if self.logprobs is None:
            return None
        return tuple(t.logprob for t in self.logprobs)
