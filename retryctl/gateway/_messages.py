"""A request's ``messages``, checked once at the edge by the OpenAI API's rules, whatever answers it.

Each message is read by its ``role`` (a discriminated union): ``system`` and ``developer`` (``content`` a
string or text parts), ``user`` (``content`` a string or a non-empty list of text, image, audio or file
parts), ``assistant`` (``content`` may be null or absent when it has ``tool_calls`` or a
``function_call``), ``tool`` (``content`` and ``tool_call_id``), the deprecated ``function`` (``name``).
``name`` is a string wherever it is given. Across messages, as OpenAI checks them: a ``tool`` message
answers a call of the assistant message before it, and each call of an assistant message is answered.

What OpenAI refuses is a 400 naming the field (``messages[2].tool_call_id``,
``messages[0].content[1].text``); what it accepts passes, with fields beyond these kept as sent (an
upstream's own extensions reach it). When the gateway answers from a text model itself (the embedded
model, or an adaptive request's samples), parts other than text and ``function`` messages are refused by
name too, since there is nothing to read them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Any, Literal, NoReturn

from pydantic import BaseModel, ConfigDict, Discriminator, Field, Tag, TypeAdapter, ValidationError
from pydantic_core import ErrorDetails

from retryctl.gateway._errors import ApiError

__all__ = ["check_messages"]


class _Strict(BaseModel):
    """Strict (no coercion: ``123`` is not a string), extra fields kept for the upstream."""

    model_config = ConfigDict(extra="allow", frozen=True, strict=True)


class TextPart(_Strict):
    """``{"type": "text", "text": ...}``."""

    type: Literal["text"]
    text: str


class _ImageUrl(_Strict):
    url: str
    detail: str | None = None


class ImagePart(_Strict):
    """``{"type": "image_url", "image_url": {"url": ...}}``."""

    type: Literal["image_url"]
    image_url: _ImageUrl


class _InputAudio(_Strict):
    data: str
    format: str


class AudioPart(_Strict):
    """``{"type": "input_audio", "input_audio": {"data": ..., "format": ...}}``."""

    type: Literal["input_audio"]
    input_audio: _InputAudio


class FilePart(_Strict):
    """``{"type": "file", "file": {...}}``."""

    type: Literal["file"]
    file: dict[str, Any]


class RefusalPart(_Strict):
    """``{"type": "refusal", "refusal": ...}`` (an assistant's)."""

    type: Literal["refusal"]
    refusal: str


def _content_kind(value: Any) -> str | None:
    if isinstance(value, str):
        return "string"
    return "parts" if isinstance(value, list) else None


_NOT_CONTENT = "must be a string or a list of content parts"


def _content(part: Any) -> Any:
    """``content``: a string, or a non-empty list of ``part`` (discriminated on ``type``)."""
    parts = Annotated[list[Annotated[part, Field(discriminator="type")]], Field(min_length=1)]
    return Annotated[
        Annotated[str, Tag("string")] | Annotated[parts, Tag("parts")],
        Discriminator(_content_kind, custom_error_type="content_type", custom_error_message=_NOT_CONTENT),
    ]


TextContent = _content(TextPart)
UserContent = _content(TextPart | ImagePart | AudioPart | FilePart)
AssistantContent = _content(TextPart | RefusalPart)


class _Function(_Strict):
    name: str
    arguments: str


class _Custom(_Strict):
    name: str
    input: str


class FunctionCall(_Strict):
    """One of an assistant's ``tool_calls``: ``{"id", "type": "function", "function": {"name",
    "arguments"}}``."""

    id: str
    type: Literal["function"]
    function: _Function


class CustomCall(_Strict):
    """A call of a custom tool: ``{"id", "type": "custom", "custom": {"name", "input"}}``."""

    id: str
    type: Literal["custom"]
    custom: _Custom


_ToolCalls = Annotated[
    list[Annotated[FunctionCall | CustomCall, Field(discriminator="type")]], Field(min_length=1)
]


class SystemMessage(_Strict):
    """``system``: instructions."""

    role: Literal["system"]
    content: TextContent  # type: ignore[valid-type]
    name: str | None = None


class DeveloperMessage(_Strict):
    """``developer``: instructions (the newer name of ``system``)."""

    role: Literal["developer"]
    content: TextContent  # type: ignore[valid-type]
    name: str | None = None


class UserMessage(_Strict):
    """``user``."""

    role: Literal["user"]
    content: UserContent  # type: ignore[valid-type]
    name: str | None = None


class AssistantMessage(_Strict):
    """``assistant``: ``content`` may be null or absent when it calls tools (checked across fields below)."""

    role: Literal["assistant"]
    content: AssistantContent | None = None  # type: ignore[valid-type]
    name: str | None = None
    refusal: str | None = None
    tool_calls: _ToolCalls | None = None
    function_call: _Function | None = None

    def calls(self) -> bool:
        """Whether it calls tools or a function, or answers in audio: then ``content`` may be null."""
        return (
            bool(self.tool_calls)
            or self.function_call is not None
            or bool((self.model_extra or {}).get("audio"))
        )


class ToolMessage(_Strict):
    """``tool``: the result of the call ``tool_call_id``."""

    role: Literal["tool"]
    content: TextContent  # type: ignore[valid-type]
    tool_call_id: str


class FunctionMessage(_Strict):
    """``function`` (deprecated): the result of the function ``name``."""

    role: Literal["function"]
    content: str | None
    name: str


Message = Annotated[
    SystemMessage | DeveloperMessage | UserMessage | AssistantMessage | ToolMessage | FunctionMessage,
    Field(discriminator="role"),
]
_MESSAGES: TypeAdapter[list[Message]] = TypeAdapter(list[Message])


def check_messages(messages: Sequence[Any], *, text_only: bool) -> None:
    """Refuse ``messages`` with a 400 naming the first field the OpenAI API would refuse; with
    ``text_only`` (the gateway samples a text model itself), also parts a text model cannot read."""
    if all(_plain(m) for m in messages):
        return  # nearly every request: string contents only, nothing more to check
    try:
        read = _MESSAGES.validate_python(list(messages))
    except ValidationError as exc:
        raise _refusal(exc.errors(include_url=False)[0]) from None
    for i, message in enumerate(read):
        if isinstance(message, AssistantMessage) and message.content is None and not message.calls():
            _refuse(f"messages[{i}].content", "is required unless 'tool_calls' or 'function_call' is given")
    _check_tool_turns(read)
    if text_only:
        _check_text_only(read)


_PLAIN_ROLES = frozenset({"system", "developer", "user", "assistant"})
_PLAIN_KEYS = frozenset({"role", "content", "name"})


def _plain(message: Any) -> bool:
    """Whether ``message`` is ``{"role", "content": str, "name"?: str}`` of a role without tool calls:
    valid, and checked here in a fraction of what the models below take (the gateway's cost is per
    request; bench/gateway_throughput.py)."""
    return (
        type(message) is dict
        and type(role := message.get("role")) is str  # a list is no role (nor hashable)
        and role in _PLAIN_ROLES
        and type(message.get("content")) is str
        and message.keys() <= _PLAIN_KEYS
        and type(message.get("name", "")) is str
    )


def _check_tool_turns(read: list[Any]) -> None:
    """Each ``tool`` message answers a call of the assistant message just before its run of tool
    messages; each such call is answered before the conversation goes on."""
    pending: dict[str, int] = {}  # call id -> the index of the assistant message that made it
    for i, message in enumerate(read):
        if isinstance(message, ToolMessage):
            if message.tool_call_id not in pending:
                _refuse(
                    f"messages[{i}].tool_call_id",
                    "must answer a call in the 'tool_calls' of the assistant message before it "
                    f"(got {_short(message.tool_call_id)})",
                )
            del pending[message.tool_call_id]
            continue
        _unanswered(pending)
        if isinstance(message, AssistantMessage) and message.tool_calls:
            pending = {call.id: i for call in message.tool_calls}
    _unanswered(pending)


def _unanswered(pending: dict[str, int]) -> None:
    if pending:
        call_id, i = next(iter(pending.items()))
        _refuse(
            f"messages[{i}].tool_calls",
            f"the call {_short(call_id)} has no 'tool' message answering it (OpenAI requires one per call)",
        )


def _check_text_only(read: list[Any]) -> None:
    for i, message in enumerate(read):
        if isinstance(message, FunctionMessage):
            _refuse(
                f"messages[{i}].role",
                "deprecated 'function' messages are not supported when the gateway samples the model "
                "itself: send the result as a 'tool' message",
                code="unsupported_value",
            )
        content = message.content
        if isinstance(content, list):
            for j, part in enumerate(content):
                if not isinstance(part, TextPart):
                    _refuse(
                        f"messages[{i}].content[{j}]",
                        f"the model is text-only: it reads 'text' parts, not {part.type!r} ones",
                        code="unsupported_content",
                    )


def _refuse(param: str, problem: str, *, code: str = "invalid_value") -> NoReturn:
    raise ApiError(400, f"invalid '{param}': {problem}", param=param, code=code)


def _refusal(error: ErrorDetails) -> ApiError:
    """pydantic's first error as a 400: its location without the union tags pydantic puts in it (the
    role or part type after an index, ``string``/``parts`` after ``content``)."""
    loc: list[int | str] = ["messages"]
    after: int | str | None = None
    for part in error["loc"]:
        tag = isinstance(part, str) and (
            isinstance(after, int) or (after == "content" and part in ("string", "parts"))
        )
        if not tag:
            loc.append(part)
        after = part
    ctx = error.get("ctx") or {}
    kind, given = error["type"], error.get("input")
    if kind in ("union_tag_invalid", "union_tag_not_found"):
        field = str(ctx.get("discriminator", "")).strip("'")
        loc.append(field)
        if kind == "union_tag_not_found":
            problem = "is missing"
        else:
            problem = f"must be one of {ctx.get('expected_tags')} (got {_short(ctx.get('tag'))})"
    elif kind == "missing":
        problem = "is required"
    else:
        problem = f"{str(error['msg']).removeprefix('Value error, ')} (got {_short(given)})"
    param = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in loc).lstrip(".")
    return ApiError(400, f"invalid '{param}': {problem}", param=param, code="invalid_value")


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."
