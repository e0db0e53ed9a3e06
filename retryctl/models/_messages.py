"""Chat messages as every backend takes them: OpenAI-style dicts, or LangChain messages converted to them."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from retryctl.exceptions import ConfigError

__all__ = ["Message", "MessagesLike", "normalise_messages"]

Message = dict[str, Any]
"""``{"role": "system" | "user" | "assistant" | "tool", "content": str, ...}``."""

MessagesLike = Sequence[Mapping[str, Any] | Any]
"""Dicts in the OpenAI shape, LangChain ``BaseMessage`` objects, or a mix."""

_ROLES = frozenset({"system", "developer", "user", "assistant", "tool"})


def _from_langchain(message: Any) -> Message:
    # Imported here: plain-dict users need not pay for langchain_core's import.
    from langchain_core.messages import BaseMessage, convert_to_openai_messages

    if not isinstance(message, BaseMessage):
        raise ConfigError(
            field="messages",
            value=message,
            problem="each message must be a dict with 'role' and 'content' or a LangChain BaseMessage",
        )
    converted = convert_to_openai_messages(message)
    return dict(converted)


def _flatten_content(content: Any, index: int) -> str | None:
    if content is None or isinstance(content, str):
        return content
    # OpenAI content parts: only text parts can go to a text model.
    if isinstance(content, Sequence):
        texts = []
        for part in content:
            if isinstance(part, Mapping) and part.get("type") == "text":
                texts.append(str(part.get("text", "")))
            elif isinstance(part, str):
                texts.append(part)
            else:
                raise ConfigError(
                    field=f"messages[{index}].content",
                    value=part,
                    problem="only text content parts are supported",
                )
        return "".join(texts)
    raise ConfigError(
        field=f"messages[{index}].content", value=content, problem="must be a string or text parts"
    )


def normalise_messages(messages: MessagesLike) -> list[Message]:
    """Check and convert messages to OpenAI-style dicts with string content.

    A ``ConfigError`` names the first bad message by index.
    """
    if isinstance(messages, str | bytes) or not isinstance(messages, Sequence):
        raise ConfigError(field="messages", value=messages, problem="must be a list of messages")
    if not messages:
        raise ConfigError(field="messages", value=messages, problem="must not be empty")
    result: list[Message] = []
    for i, raw in enumerate(messages):
        message = dict(raw) if isinstance(raw, Mapping) else _from_langchain(raw)
        role = message.get("role")
        if role not in _ROLES:
            raise ConfigError(
                field=f"messages[{i}].role", value=role, problem=f"must be one of {sorted(_ROLES)}"
            )
        if "content" not in message and not message.get("tool_calls"):
            raise ConfigError(field=f"messages[{i}].content", value=None, problem="is missing")
        message["content"] = _flatten_content(message.get("content"), i)
        result.append(message)
    return result
