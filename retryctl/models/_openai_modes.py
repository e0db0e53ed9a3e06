"""How a structured request is put to a server, rung by rung down what the server can serve.

A ``json_schema`` response format is asked natively first; a server that refuses it gets
``json_object`` with the schema beside it (llama.cpp's server reads ``response_format.schema`` and
constrains its output to it) and in the prompt; then bare ``json_object`` with the schema in the prompt;
then the prompt alone, the JSON parsed from the text. Tools go natively, else as a prompt whose JSON
reply is read as the call. In the modes where the server does not enforce the structure, each
candidate is checked (:func:`~retryctl.models._constraints.check_structured`); a call none of whose
candidates holds usable JSON is a :class:`~retryctl.models.MalformedResponse`, which the controller
refines with the problem as feedback.
"""

from __future__ import annotations

import json
from collections.abc import Collection
from dataclasses import dataclass, replace
from typing import Any, Literal

from retryctl.models._constraints import Structured, check_structured, structure_instruction
from retryctl.models._errors import MalformedResponse
from retryctl.models._messages import Message
from retryctl.models._types import Candidate, Constraint, SamplingParams

__all__ = ["DROPPABLE", "Mode", "Plan", "feature_of", "plan_for", "sent_names", "usable_or_raise"]

Mode = Literal["text", "json_schema", "json_object+schema", "json_object", "tools", "prompt"]
"""How one request carries its structure; every mode but ``text`` and ``prompt`` is a feature a server
may refuse."""

DROPPABLE = ("logprobs", "seed", "n", "top_p", "top_k", "min_p", "stream", "stream_options")
"""Knobs a request goes on without when the server refuses them (the candidate's notes say so); a
refused ``stream`` leaves samples uncut (``SamplingParams.cut_below``), a refused ``stream_options``
leaves a stream without its usage chunk."""

_LADDERS: dict[str, tuple[Mode, ...]] = {
    "text": ("text",),
    "json_schema": ("json_schema", "json_object+schema", "json_object", "prompt"),
    "json_object": ("json_object", "prompt"),
    "tools": ("tools", "prompt"),
}
_TOOL_NAMES = frozenset({"tools", "tool_choice", "functions", "parallel_tool_calls"})
_CONSTRAINT: dict[Mode, Constraint] = {
    "json_schema": "strict",
    "json_object+schema": "strict",
    "json_object": "lenient",
    "prompt": "none",
}
_NOTE: dict[Mode, str] = {
    "json_schema": "structured output: json_schema",
    "json_object+schema": "structured output: json_object with the schema (the server refused json_schema)",
    "json_object": "structured output: json_object, the schema in the prompt (the server refused {refused})",
    "prompt": "structured output: plain prompt, JSON parsed from the text (the server refused {refused})",
    "tools": "",
}


def _wanted(params: SamplingParams) -> str:
    if params.tools:
        return "tools"
    if params.json_schema is not None:
        return "json_schema"
    return "json_object" if params.wants_json else "text"


@dataclass(frozen=True)
class Plan:
    """One request's mode and the features the server is known to refuse."""

    mode: Mode
    refused: frozenset[str]
    wanted: str

    @property
    def checked(self) -> bool:
        """Whether this is a fallback rung, where the server may not hold the reply to the structure."""
        return self.mode != _LADDERS[self.wanted][0]

    def messages(self, messages: list[Message], params: SamplingParams) -> list[Message]:
        """The conversation as sent: on a fallback rung, with the structure described in words."""
        if not self.checked:
            return messages
        sent = _plain_tool_traffic(messages) if self.wanted == "tools" else messages
        return with_instruction(sent, structure_instruction(params))

    def structure(self, params: SamplingParams) -> dict[str, Any]:
        """The payload fields that carry the structure in this mode."""
        fmt = params.response_format
        fields: dict[str, Any] = {}
        if self.mode == "json_object+schema" and params.json_schema is not None:
            fields["response_format"] = {"type": "json_object", "schema": dict(params.json_schema)}
        elif self.mode == "json_object" and self.checked:
            fields["response_format"] = {"type": "json_object"}
        elif self.mode != "prompt" and fmt is not None and str(fmt.get("type")) not in self.refused:
            fields["response_format"] = dict(fmt)
        if self.mode == "tools":
            fields["tools"] = [t.to_openai() for t in params.tools]
        return fields

    def note(self) -> str | None:
        """What a candidate's notes say about how it was served."""
        if self.wanted == "text":
            return None
        if self.mode == "prompt" and self.wanted == "tools":
            return "tool calls: plain prompt, the call parsed from the text (the server refused tools)"
        refused = " and ".join(m for m in _LADDERS[self.wanted] if m in self.refused) or "nothing"
        return _NOTE[self.mode].format(refused=refused) or None

    def read(self, candidate: Candidate, params: SamplingParams, index: int) -> tuple[Candidate, str | None]:
        """The candidate as this mode serves it, and the structure problem found in it, if any."""
        notes = (*candidate.notes, *(n for n in (self.note(),) if n))
        constraint = _CONSTRAINT.get(self.mode, candidate.constraint)
        if not self.checked:
            return replace(candidate, constraint=constraint, notes=notes), None
        text, checked = _json_in(candidate.text, params, f"call_{index}")
        if checked.problem is not None:
            notes = (*notes, f"no usable JSON in the reply: {checked.problem}")
            return replace(candidate, constraint="none", notes=notes), checked.problem
        if checked.tool_calls:
            served = replace(candidate, text="", tool_calls=checked.tool_calls, finish_reason="tool_calls")
        else:
            served = replace(candidate, text=text)
        return replace(served, constraint=constraint, notes=notes), None


def plan_for(params: SamplingParams, refused: Collection[str]) -> Plan:
    """The first mode of ``params``'s ladder that the server has not refused."""
    wanted = _wanted(params)
    ladder = _LADDERS[wanted]
    mode = next((m for m in ladder if m not in refused), ladder[-1])
    return Plan(mode=mode, refused=frozenset(refused), wanted=wanted)


def sent_names(payload: dict[str, Any]) -> set[str]:
    """The names an error body may use for what ``payload`` asked: its keys and its format's type."""
    names = set(payload)
    fmt = payload.get("response_format")
    if isinstance(fmt, dict) and isinstance(fmt.get("type"), str):
        names.add(fmt["type"])
    return names


def feature_of(parameter: str, payload: dict[str, Any], plan: Plan) -> str | None:
    """The feature a refused ``parameter`` stands for, if the request can go on without it."""
    fmt = payload.get("response_format")
    if fmt is not None and parameter in ("response_format", "json_schema", "json_object", "schema"):
        # The mode that put the format in the request is what the server refused.
        return plan.mode if plan.mode not in ("text", "tools", "prompt") else str(fmt.get("type"))
    if parameter in _TOOL_NAMES and "tools" in payload:
        return "tools"
    if parameter in ("logprobs", "top_logprobs") and "logprobs" in payload:
        return "logprobs"
    if parameter in DROPPABLE and parameter in payload:
        return parameter
    return None


def usable_or_raise(read: list[tuple[Candidate, str | None]], *, backend: str) -> list[Candidate]:
    """The candidates, unless every one of them failed its structure check."""
    problems = [p for _, p in read if p is not None]
    if read and len(problems) == len(read):
        first = read[0][0]
        raise MalformedResponse(
            f"none of the {len(read)} replies held the requested JSON ({problems[0]})",
            backend=backend,
            body=first.text,
        )
    return [c for c, _ in read]


def with_instruction(messages: list[Message], instruction: str | None) -> list[Message]:
    """``messages`` with ``instruction`` appended to the first system message (or put first as one)."""
    if not instruction:
        return messages
    out = list(messages)
    if out and out[0].get("role") == "system":
        out[0] = {**out[0], "content": f"{out[0].get('content') or ''}\n\n{instruction}"}
    else:
        out.insert(0, {"role": "system", "content": instruction})
    return out


def _plain_tool_traffic(messages: list[Message]) -> list[Message]:
    """Tool calls and results as plain text, for a server that takes no tools (nor their roles)."""
    out: list[Message] = []
    for m in messages:
        role, content = m.get("role"), str(m.get("content") or "")
        if role == "tool":
            out.append({"role": "user", "content": f"Tool result: {content}"})
        elif m.get("tool_calls"):
            calls = json.dumps(m["tool_calls"])
            out.append({"role": "assistant", "content": f"{content}\n{calls}".strip()})
        else:
            out.append(m)
    return out


def _json_in(text: str, params: SamplingParams, call_id: str) -> tuple[str, Structured]:
    """The first JSON object in ``text`` that passes the structure check, else the first problem met.

    A model asked in words may wrap its JSON in prose or a code fence; the object itself is the answer.
    """
    first: Structured | None = None
    decoder = json.JSONDecoder(strict=False)  # as check_structured: raw control characters in strings
    start = text.find("{")
    while start != -1:
        try:
            _, end = decoder.raw_decode(text, start)
        except json.JSONDecodeError as exc:
            first = first or Structured(problem=f"not valid JSON ({exc.msg} at char {exc.pos})")
        else:
            found = text[start:end]
            checked = check_structured(found, params, call_id)
            if checked.problem is None:
                return found, checked
            first = first or checked
        start = text.find("{", start + 1)
    return text, first or Structured(problem="no JSON object in the reply")
