"""The checks of a model's answer before the agent acts on it: every tool call names a tool the agent
has and its arguments fit that tool's schema; a structured response parses. A failed check is a
:class:`~retryctl.controller.ValidatorResult` whose evidence names the call and the field, so the
refine feedback can say exactly what to fix; the refine round itself goes back to the model as the
messages of :func:`refine_messages`."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from langchain_core.messages import AIMessage, AnyMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.tools import BaseTool
from pydantic import BaseModel, ValidationError

from retryctl.controller import ValidatorResult

__all__ = ["check_response", "field_errors", "refine_messages"]


def field_errors(exc: ValidationError) -> str:
    """A pydantic error as one line per field: ``field 'b': Input should be a valid number (got 'x')``."""
    parts = []
    for err in exc.errors(include_url=False):
        where = ".".join(str(p) for p in err.get("loc", ())) or "(the whole object)"
        got = err.get("input")
        shown = "" if isinstance(got, dict) else f" (got {got!r})"
        parts.append(f"field '{where}': {err.get('msg', 'invalid')}{shown}")
    return "; ".join(parts)


def _check_call(call: Mapping[str, Any], tools: Mapping[str, BaseTool]) -> ValidatorResult:
    name = str(call.get("name"))
    tool = tools.get(name)
    if tool is None:
        known = ", ".join(sorted(tools)) or "none"
        return ValidatorResult(f"tool_name:{name}", False, f"there is no tool {name!r} (tools: {known})")
    schema = tool.tool_call_schema
    if isinstance(schema, type) and issubclass(schema, BaseModel):
        try:
            schema.model_validate(dict(call.get("args") or {}))
        except ValidationError as exc:
            return ValidatorResult(f"tool_args:{name}", False, f"{name}: {field_errors(exc)}")
    return ValidatorResult(f"tool_args:{name}", True)


def check_response(
    messages: Sequence[BaseMessage], tools: Mapping[str, BaseTool], *, skip: frozenset[str] = frozenset()
) -> list[ValidatorResult]:
    """The checks of the model's last message: one per tool call (``skip`` names calls that are not
    tools, such as the structured-output tools LangChain answers itself), failed checks first."""
    last = next((m for m in reversed(messages) if isinstance(m, AIMessage)), None)
    if last is None:
        return [ValidatorResult("model_answered", False, "the model returned no message", check=False)]
    checks = [_check_call(c, tools) for c in last.tool_calls if c["name"] not in skip]
    for bad in last.invalid_tool_calls:
        # Arguments that were not even JSON: the provider could not parse them into a tool call.
        name = str(bad.get("name"))
        checks.append(
            ValidatorResult(f"tool_args:{name}", False, f"{name}: {bad.get('error') or 'not JSON'}")
        )
    # A final answer with no tool calls has nothing here to check: that it came is no check of it.
    return sorted(checks, key=lambda c: c.passed) or [ValidatorResult("model_answered", True, check=False)]


def refine_messages(response: Sequence[BaseMessage], feedback: str) -> list[AnyMessage]:
    """The messages of one refine round: the model's refused message, then the feedback (a
    ``ToolMessage`` per tool call it made, so the history stays valid for every provider; else a
    ``HumanMessage``)."""
    last = next((m for m in reversed(response) if isinstance(m, AIMessage)), None)
    if last is None:
        return [HumanMessage(feedback)]
    calls = [*last.tool_calls, *last.invalid_tool_calls]
    if not calls:
        return [last, HumanMessage(feedback)]
    # Invalid calls are not replayed as tool calls (their arguments are not JSON): the message keeps
    # its text and valid calls, and the feedback names every call.
    sent = last.model_copy(update={"invalid_tool_calls": []})
    answers: list[AnyMessage] = [
        ToolMessage(content=feedback, tool_call_id=str(c["id"]), name=c["name"], status="error")
        for c in last.tool_calls
    ]
    if last.invalid_tool_calls:
        answers.append(HumanMessage(feedback))
    return [sent, *answers]
