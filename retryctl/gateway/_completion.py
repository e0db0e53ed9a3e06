"""Chat completions the gateway writes itself (the embedded model's, adaptive ones), in the wire format."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator, Sequence
from typing import Any

import orjson

from retryctl.models import Candidate

__all__ = ["candidate_choice", "completion", "finish_reason", "logprobs_of", "sse_chunks"]


def completion_id() -> str:
    """An id in OpenAI's form (``chatcmpl-`` and 24 hex digits)."""
    return f"chatcmpl-{uuid.uuid4().hex[:24]}"


def finish_reason(candidate: Candidate) -> str:
    """Why ``candidate`` ended, in OpenAI's words: ``tool_calls``, ``length`` (cut by ``max_tokens``, or
    cut short by the stopping rule's bound: either way the text is not whole) or ``stop``."""
    if candidate.tool_calls:
        return "tool_calls"
    if candidate.finish_reason in ("length", "cut"):
        return "length"
    return candidate.finish_reason or "stop"


def logprobs_of(candidate: Candidate, top: int) -> dict[str, Any] | None:
    """``choices[i].logprobs`` in OpenAI's shape: each token with its logprob, its UTF-8 bytes and
    its ``top`` most likely alternatives (``None`` when the backend gave no logprobs)."""
    if candidate.logprobs is None:
        return None

    def entry(token: str, logprob: float) -> dict[str, Any]:
        return {"token": token, "logprob": logprob, "bytes": list(token.encode("utf-8"))}

    return {
        "content": [
            entry(t.token, t.logprob) | {"top_logprobs": [entry(a, lp) for a, lp in t.top[:top]]}
            for t in candidate.logprobs
        ],
        "refusal": None,
    }


def candidate_choice(index: int, candidate: Candidate, *, top_logprobs: int | None = None) -> dict[str, Any]:
    """One ``choices[i]`` entry for a sampled candidate (its tool calls included); with
    ``top_logprobs`` (the request asked for ``logprobs``) its token logprobs too."""
    message: dict[str, Any] = {"role": "assistant", "content": candidate.text}
    finish = finish_reason(candidate)
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
    logprobs = None if top_logprobs is None else logprobs_of(candidate, top_logprobs)
    return {"index": index, "message": message, "finish_reason": finish, "logprobs": logprobs}


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


def sse_chunks(
    done: dict[str, Any], *, include_usage: bool = False, extra: dict[str, Any] | None = None
) -> Iterator[bytes]:
    """A finished completion as a server-sent event stream, as OpenAI streams one: a chunk with each
    choice's role and whole content (and its logprobs), a chunk with its finish reason (carrying
    ``extra``'s top-level fields: an adaptive answer's ``retryctl`` block), the usage when the request's
    ``stream_options.include_usage`` asked for it, then ``[DONE]``. For what is already whole: a
    decided adaptive answer, a structured or tool-call candidate (:mod:`._stream` streams the rest
    token by token)."""
    head = {k: done[k] for k in ("id", "created", "model")} | {"object": "chat.completion.chunk"}
    for choice in done["choices"]:
        delta = {k: v for k, v in choice["message"].items() if v is not None}
        if "tool_calls" in delta:
            delta["tool_calls"] = [{"index": i, **c} for i, c in enumerate(delta["tool_calls"])]
        part: dict[str, Any] = {"index": choice["index"], "delta": delta, "finish_reason": None}
        if choice.get("logprobs") is not None:
            part["logprobs"] = choice["logprobs"]
        last = {
            **head,
            "choices": [{"index": choice["index"], "delta": {}, "finish_reason": choice["finish_reason"]}],
            **(extra or {}),
        }
        yield b"data: " + orjson.dumps({**head, "choices": [part]}) + b"\n\n"
        yield b"data: " + orjson.dumps(last) + b"\n\n"
    if include_usage:
        yield b"data: " + orjson.dumps({**head, "choices": [], "usage": done["usage"]}) + b"\n\n"
    yield b"data: [DONE]\n\n"
