"""OpenAI's rules for the body's output fields, checked once at the edge for every mode: ``logprobs`` and
``top_logprobs``, ``response_format`` and ``tool_choice``.

Each is a rule of the request's shape (a value the OpenAI API refuses whatever model it names), so a
proxied request meets it as an embedded or adaptive one does: a 400 naming the field, never a 200 on one
mode and a 502 on another. What the values then do is the sampler's (:mod:`._knobs` where the gateway
samples itself, the upstream otherwise).
"""

from __future__ import annotations

import re
from typing import Any

from retryctl.gateway._errors import ApiError

__all__ = ["MAX_TOP_LOGPROBS", "check_output_fields"]

MAX_TOP_LOGPROBS = 20
"""OpenAI's own bound on ``top_logprobs``."""

_FORMATS = ("text", "json_object", "json_schema")
_TOOL_CHOICES = ("none", "auto", "required")
_CHOICE_TYPES = ("function", "allowed_tools", "custom")
_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
"""OpenAI's rule for a ``json_schema`` name."""


def check_output_fields(body: dict[str, Any]) -> None:
    """Refuse, with a 400 naming the field, an output field of ``body`` the OpenAI API refuses."""
    _check_logprobs(body.get("logprobs"), body.get("top_logprobs"))
    if body.get("response_format") is not None:
        _check_format(body["response_format"])
    if body.get("tool_choice") is not None:
        _check_tool_choice(body["tool_choice"], body.get("tools"))


def _check_logprobs(logprobs: Any, top: Any) -> None:
    if logprobs is not None and not isinstance(logprobs, bool):
        raise _bad("logprobs", f"must be a boolean (got {logprobs!r})")
    if top is None:
        return
    if isinstance(top, bool) or not isinstance(top, int) or not 0 <= top <= MAX_TOP_LOGPROBS:
        raise _bad("top_logprobs", f"must be an integer from 0 to {MAX_TOP_LOGPROBS} (got {top!r})")
    if logprobs is not True:
        raise _bad("top_logprobs", '"logprobs" must be true when "top_logprobs" is set')


def _check_format(fmt: Any) -> None:
    if not isinstance(fmt, dict):
        raise _bad("response_format", f"must be an object with a 'type' (got {_short(fmt)})")
    kind = fmt.get("type")
    if kind not in _FORMATS:
        raise _bad("response_format.type", f"must be one of {', '.join(_FORMATS)} (got {_short(kind)})")
    if kind != "json_schema":
        return
    spec = fmt.get("json_schema")
    if spec is None:
        raise _bad("response_format.json_schema", 'is required when "type" is "json_schema"')
    if not isinstance(spec, dict):
        raise _bad("response_format.json_schema", f"must be an object (got {_short(spec)})")
    name = spec.get("name")
    if not isinstance(name, str) or not _NAME.match(name):
        raise _bad(
            "response_format.json_schema.name",
            f"is required: 1 to 64 letters, digits, '_' or '-' (got {_short(name)})",
        )
    if "schema" in spec and not isinstance(spec["schema"], dict):
        raise _bad("response_format.json_schema.schema", f"must be an object (got {_short(spec['schema'])})")
    if "strict" in spec and spec["strict"] is not None and not isinstance(spec["strict"], bool):
        raise _bad("response_format.json_schema.strict", f"must be a boolean (got {_short(spec['strict'])})")


def _check_tool_choice(choice: Any, tools: Any) -> None:
    if isinstance(choice, str):
        if choice not in _TOOL_CHOICES:
            known = ", ".join(_TOOL_CHOICES)
            raise _bad("tool_choice", f"must be one of {known} or an object (got {choice!r})")
        if choice == "required" and not tools:
            raise _bad("tool_choice", '"required" is only allowed when "tools" are given')
        return
    if not isinstance(choice, dict) or choice.get("type") not in _CHOICE_TYPES:
        kinds = ", ".join(_CHOICE_TYPES)
        raise _bad("tool_choice", f"must be a string or an object with a 'type' of {kinds}")
    if not tools:
        raise _bad("tool_choice", 'an object is only allowed when "tools" are given')
    if choice["type"] != "function":
        return
    function = choice.get("function")
    name = function.get("name") if isinstance(function, dict) else None
    if not isinstance(name, str) or not name:
        raise _bad("tool_choice.function.name", "is required: the name of a function in 'tools'")
    named = {t["function"].get("name") for t in tools if isinstance(t.get("function"), dict)}
    if name not in named:
        raise _bad("tool_choice.function.name", f"names no function in 'tools' (got {name!r})")


def _bad(param: str, problem: str) -> ApiError:
    return ApiError(400, f"invalid '{param}': {problem}", param=param, code="invalid_value")


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."
