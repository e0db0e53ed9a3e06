"""Structured output for the embedded model: JSON-schema grammars, checks, and strict → lenient relaxing.

A *strict* constraint is a grammar built from the exact schema (the tool's arguments, or the response
format's schema); a *lenient* one accepts any JSON object (for tool calls: a known tool name with any
arguments object). Grammar decoding guarantees the syntax while the
text is complete, but a candidate can still fail: cut off at ``max_tokens``, or a schema the grammar
converter cannot express. :class:`ConstraintPolicy` says how many strict tries to make before relaxing.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from retryctl.exceptions import ConfigError
from retryctl.models._types import Constraint, SamplingParams, ToolCall, ToolSpec

__all__ = [
    "ConstraintPolicy",
    "Structured",
    "check_structured",
    "schema_for",
    "structure_instruction",
]


@dataclass(frozen=True, kw_only=True)
class ConstraintPolicy:
    """How hard the embedded backend holds a structured answer to its schema."""

    strict_attempts: int = 2
    """Tries per candidate with the exact-schema grammar before relaxing."""
    relax: bool = True
    """After the strict tries fail, try the lenient grammar (any JSON object) and say so in the notes."""
    lenient_attempts: int = 1
    """Tries with the lenient grammar; the last output is returned (with a note) if they all fail."""

    def __post_init__(self) -> None:
        if self.strict_attempts < 1:
            raise ConfigError(field="strict_attempts", value=self.strict_attempts, problem="must be >= 1")
        if self.lenient_attempts < 1:
            raise ConfigError(field="lenient_attempts", value=self.lenient_attempts, problem="must be >= 1")

    def modes(self) -> list[Constraint]:
        """The constraint of each try, in order."""
        strict: list[Constraint] = ["strict"] * self.strict_attempts
        lenient: list[Constraint] = ["lenient"] * self.lenient_attempts if self.relax else []
        return strict + lenient


@dataclass(frozen=True)
class Structured:
    """What checking a structured candidate found: tool calls, or the problem."""

    tool_calls: tuple[ToolCall, ...] = ()
    problem: str | None = None


def _tool_schema(tool: ToolSpec) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {"name": {"const": tool.name}, "arguments": dict(tool.parameters)},
        "required": ["name", "arguments"],
    }


_ANY_OBJECT: dict[str, Any] = {"type": "object"}


def schema_for(params: SamplingParams, mode: Constraint) -> dict[str, Any] | None:
    """The JSON schema a grammar should enforce, or ``None`` for free text."""
    if not params.tools and not params.wants_json:
        return None
    if params.tools and mode == "lenient":
        # Lenient keeps the envelope (a known tool name) and frees the arguments' schema.
        return {
            "type": "object",
            "properties": {
                "name": {"enum": [t.name for t in params.tools]},
                "arguments": {"type": "object"},
            },
            "required": ["name", "arguments"],
        }
    if params.tools:
        options = [_tool_schema(t) for t in params.tools]
        return options[0] if len(options) == 1 else {"anyOf": options}
    if mode == "lenient" or params.json_schema is None:
        return _ANY_OBJECT
    return dict(params.json_schema)


def structure_instruction(params: SamplingParams) -> str | None:
    """A system instruction telling a small model which JSON to write (the grammar then enforces it)."""
    if params.tools:
        lines = [
            "You can call one tool. Reply with only a JSON object "
            '{"name": <tool name>, "arguments": {...}}. Tools:'
        ]
        for tool in params.tools:
            lines.append(
                f"- {tool.name}: {tool.description} Arguments schema: {json.dumps(dict(tool.parameters))}"
            )
        return "\n".join(lines)
    if params.wants_json:
        schema = params.json_schema
        suffix = f" matching this JSON schema: {json.dumps(dict(schema))}" if schema else ""
        return f"Reply with only a JSON object{suffix}."
    return None


def _missing_required(value: Mapping[str, Any], schema: Mapping[str, Any]) -> list[str]:
    required = schema.get("required", ())
    return [key for key in required if key not in value] if isinstance(required, Sequence) else []


def check_structured(text: str, params: SamplingParams, call_id: str) -> Structured:
    """Parse and check a structured candidate: JSON, a known tool, required fields present.

    Full JSON-schema validation is the grammar's job; this catches what a grammar cannot prevent
    (truncation) or what a lenient grammar lets through (an unknown tool, missing fields).
    """
    try:
        # strict=False: llama.cpp's schema grammars let raw control characters into strings.
        value = json.loads(text, strict=False)
    except json.JSONDecodeError as exc:
        return Structured(problem=f"not valid JSON ({exc.msg} at char {exc.pos})")
    if not params.tools:
        schema = params.json_schema or {}
        if schema.get("type", "object") == "object" and not isinstance(value, dict):
            return Structured(problem="not a JSON object")
        missing = _missing_required(value, schema) if isinstance(value, dict) else []
        return Structured(problem=f"missing required {missing}" if missing else None)
    if not isinstance(value, dict):
        return Structured(problem="a tool call must be a JSON object")
    tools = {t.name: t for t in params.tools}
    name, arguments = value.get("name"), value.get("arguments")
    if name not in tools:
        return Structured(problem=f"unknown tool {name!r}; known: {sorted(tools)}")
    if not isinstance(arguments, dict):
        return Structured(problem=f"tool {name!r} arguments are not a JSON object")
    missing = _missing_required(arguments, tools[name].parameters)
    if missing:
        return Structured(problem=f"tool {name!r} is missing required arguments {missing}")
    call = ToolCall(name=name, arguments_json=json.dumps(arguments), id=call_id)
    return Structured(tool_calls=(call,))
