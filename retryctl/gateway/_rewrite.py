"""What the gateway changes in a body it proxies, and in the answer it passes back (docs/gateway.md).

Going up: a message whose content is only text parts goes as one string, the parts' texts joined, which
means the same under OpenAI's rules; servers that read only strings (llama.cpp's Python server answers
a list with a 500) then answer it. Any other part (an image, audio, a file) goes untouched, its list
with it. Coming back: ``model`` in the answer and in every chunk of a stream is the name the client
sent (the gateway's ``--model-name``), not the upstream's own (often a file path on the server), and an
error the client reads says that name too; the upstream's name stays in the server's log.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import orjson

from retryctl._log import get_logger
from retryctl.gateway._errors import ApiError

__all__ = ["joined_text_parts", "public_error", "renamed_body", "renamed_events"]

_log = get_logger("retryctl.gateway")


def joined_text_parts(messages: Any) -> list[Any] | None:
    """``messages`` with each all-text ``content`` list as one string; ``None`` when none is (the list
    is then sent as it is, uncopied)."""
    if not isinstance(messages, list):
        return None
    out: list[Any] | None = None
    for i, message in enumerate(messages):
        content = message.get("content") if isinstance(message, dict) else None
        if not isinstance(content, list) or not content:
            continue
        if all(_is_text(part) for part in content):
            if out is None:
                out = list(messages)
            out[i] = {**message, "content": "".join(p["text"] for p in content)}
    return out


def _is_text(part: Any) -> bool:
    return isinstance(part, dict) and part.get("type") == "text" and isinstance(part.get("text"), str)


def renamed_body(raw: bytes, name: str) -> bytes:
    """A completion's JSON with ``model`` set to ``name`` (anything else passed as it is)."""
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return raw
    if not isinstance(body, dict) or "model" not in body or body["model"] == name:
        return raw
    body["model"] = name
    return orjson.dumps(body)


async def renamed_events(chunks: AsyncIterator[bytes], name: str) -> AsyncIterator[bytes]:
    """A server-sent event stream with ``model`` set to ``name`` in every ``data:`` chunk. Whole lines
    only are rewritten: a line split over reads is held until its end comes."""
    held = b""
    async for chunk in chunks:
        held += chunk
        end = held.rfind(b"\n")
        if end == -1:
            continue
        ready, held = held[: end + 1], held[end + 1 :]
        yield b"".join(_renamed_line(line, name) for line in ready.splitlines(keepends=True))
    if held:
        yield _renamed_line(held, name)


def _renamed_line(line: bytes, name: str) -> bytes:
    if not line.startswith(b"data:"):
        return line
    payload = line[5:].strip()
    if not payload.startswith(b"{"):
        return line  # [DONE]
    ending = line[len(line.rstrip(b"\r\n")) :]
    renamed = renamed_body(payload, name)
    return line if renamed is payload else b"data: " + renamed + ending


def public_error(error: ApiError, *, internal: str, public: str) -> ApiError:
    """``error`` as the client reads it: the upstream's own model name (``internal``) said as the name
    the client uses (``public``); the original goes to the server's log."""
    if internal == public or internal not in error.message:
        return error
    _log.warning("gateway.upstream_error", status=error.status, message=error.message)
    return ApiError(
        error.status,
        error.message.replace(internal, public),
        type=error.type,
        param=error.param,
        code=error.code,
        retry_after_s=error.retry_after_s,
    )
