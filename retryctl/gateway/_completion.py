"""Chat completions the gateway writes itself (the embedded model's, adaptive ones), in the wire format."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator, Sequence
from typing import Any

import orjson

from retryctl.models import Candidate

__all__ = ["candidate_choice", "completion", "sse_chunks"]


def completion_id() -> str:
    """An id in OpenAI's form (``chatcmpl-`` and 24 hex digits)."""
    return f"chatcmpl-{uuid.uuid4().hex[:24]}"


def candidate_choice(index: int, candidate: Candidate) -> dict[str, Any]:
    """One ``choices[i]`` entry for a sampled candidate (its tool calls included)."""
    message: dict[str, Any] = {"role": "assistant", "content": candidate.text}
    finish = candidate.finish_reason or "stop"
    if candidate.tool_calls:
        message["content"] = candidate.text or None
        message["tool_calls"] = [
            {
                "id": call.id or f"call_{uuid.uuid4().hex[:24]}",
                "type": "function",
                "function": {"name": call.name, "arguments": call.arguments_json},
            }
            for call in candidate.tool_calls
        ]
        finish = "tool_calls"
    return {"index": index, "message": message, "finish_reason": finish, "logprobs": None}


def completion(
    *,
    model: str,
    choices: Sequence[dict[str, Any]],
    input_tokens: int,
    output_tokens: int,
    id: str | None = None,
    extra: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """A ``chat.completion`` object; ``extra`` adds top-level fields (the ``retryctl`` block)."""
    body: dict[str, Any] = {
        "id": id or completion_id(),
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": list(choices),
        "usage": {
            "prompt_tokens": input_tokens,
            "completion_tokens": output_tokens,
            "total_tokens": input_tokens + output_tokens,
        },
    }
    if extra:
        body.update(extra)
    return body


def sse_chunks(done: dict[str, Any], *, include_usage: bool = False) -> Iterator[bytes]:
    """A finished completion as a server-sent event stream, as OpenAI streams one: a chunk with each
    choice's role and whole content, a chunk with its finish reason, the usage when the request's
    ``stream_options.include_usage`` asked for it, then ``[DONE]``.
    (The embedded model decodes a candidate whole; the stream carries it in one piece.)"""
    head = {k: done[k] for k in ("id", "created", "model")} | {"object": "chat.completion.chunk"}
    for choice in done["choices"]:
        delta = {k: v for k, v in choice["message"].items() if v is not None}
        if "tool_calls" in delta:
            delta["tool_calls"] = [{"index": i, **c} for i, c in enumerate(delta["tool_calls"])]
        first = {**head, "choices": [{"index": choice["index"], "delta": delta, "finish_reason": None}]}
        last = {
            **head,
            "choices": [{"index": choice["index"], "delta": {}, "finish_reason": choice["finish_reason"]}],
        }
        yield b"data: " + orjson.dumps(first) + b"\n\n"
        yield b"data: " + orjson.dumps(last) + b"\n\n"
    if include_usage:
        yield b"data: " + orjson.dumps({**head, "choices": [], "usage": done["usage"]}) + b"\n\n"
    yield b"data: [DONE]\n\n"
