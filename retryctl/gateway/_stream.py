"""An in-process model's answer streamed as it is decoded (``"stream": true`` on the embedded model).

The backend decodes in a worker thread and hands each piece of final text to a callback, which puts it
on the event loop's queue; the response sends each piece as its own chunk. A plain candidate streams
token by token; one decoded under a grammar (``response_format``, ``tools``) is checked whole before it
counts, so it arrives whole when it is done. When the caller goes away the callback tells the decoder to
stop at its next token, so an abandoned answer costs no more decoding.
"""

from __future__ import annotations

import asyncio
import inspect
import threading
import time
from collections.abc import AsyncIterator, Sequence
from typing import Any

import orjson

from retryctl.gateway._completion import completion_id, finish_reason, logprobs_of
from retryctl.gateway._errors import from_fault
from retryctl.models import BackendError, Candidate, ModelBackend, SamplingParams

__all__ = ["TokenStream", "streams_text"]

_Event = tuple[str, Any, Any]
"""``("text", index, piece)``, ``("done", candidates, None)`` or ``("error", exception, None)``."""


def streams_text(backend: ModelBackend) -> bool:
    """Whether ``backend`` can hand on its text while decoding (a ``sample_sync`` taking ``on_text``:
    the embedded model)."""
    sample_sync = getattr(backend, "sample_sync", None)
    return sample_sync is not None and "on_text" in inspect.signature(sample_sync).parameters


class TokenStream:
    """One streamed completion of ``k`` choices from ``backend``: :meth:`start`, then :meth:`chunks`
    (server-sent events); :meth:`close` when the response ends however it ends."""

    def __init__(
        self,
        backend: ModelBackend,
        messages: Sequence[Any],
        params: SamplingParams,
        *,
        k: int,
        model: str,
        include_usage: bool,
        top_logprobs: int | None,
    ) -> None:
        self._backend = backend
        self._messages = messages
        self._params = params
        self._k = k
        self._include_usage = include_usage
        self._model = model
        self._top_logprobs = top_logprobs
        self._queue: asyncio.Queue[_Event] = asyncio.Queue()
        self._gone = threading.Event()
        self._first: _Event | None = None
        self._head = {
            "id": completion_id(),
            "object": "chat.completion.chunk",
            "created": int(time.time()),
            "model": model,
        }

    async def start(self) -> None:
        """Start decoding and wait for its first piece, so a fault before any text (a prompt longer
        than the context) is still an error response, not a stream that ends at once."""
        loop = asyncio.get_running_loop()

        def on_text(index: int, piece: str) -> bool:
            if self._gone.is_set():
                return False
            if piece:
                loop.call_soon_threadsafe(self._queue.put_nowait, ("text", index, piece))
            return True

        def decode() -> None:
            try:
                out = self._backend.sample_sync(  # type: ignore[attr-defined]
                    self._messages, self._params, k=self._k, on_text=on_text
                )
                event: _Event = ("done", out, None)
            except Exception as exc:
                event = ("error", exc, None)
            loop.call_soon_threadsafe(self._queue.put_nowait, event)

        loop.run_in_executor(None, decode)
        try:
            first = await self._queue.get()
        except asyncio.CancelledError:
            self._gone.set()  # the caller went away before the first piece
            raise
        if first[0] == "error":
            exc = first[1]
            if isinstance(exc, BackendError):
                raise from_fault(exc, upstream=self._model) from None
            raise exc
        self._first = first

    async def close(self) -> None:
        """The response ended (sent whole, or its caller went away): decoding stops at its next token."""
        self._gone.set()

    async def chunks(self) -> AsyncIterator[bytes]:
        """The events: each piece of text as it comes, then each choice's rest and finish reason, the
        usage when asked, ``[DONE]``. A fault after the first piece propagates: the stream is cut, not
        ended as if the answer were whole."""
        assert self._first is not None, "start() first"
        sent: dict[int, str] = {}
        event = self._first
        while event[0] == "text":
            _, index, piece = event
            if index not in sent:
                sent[index] = ""
                yield self._chunk(index, {"role": "assistant", "content": ""})
            sent[index] += piece
            yield self._chunk(index, {"content": piece})
            event = await self._queue.get()
        if event[0] == "error":
            raise event[1]
        candidates: list[Candidate] = event[1]
        for index, candidate in enumerate(candidates):
            for delta in self._rest(candidate, sent.get(index)):
                yield self._chunk(index, delta)
            yield self._chunk(index, {}, finish=finish_reason(candidate), candidate=candidate)
        if self._include_usage:
            usage = _usage(candidates)
            yield _event({**self._head, "choices": [], "usage": usage})
        yield b"data: [DONE]\n\n"

    def _rest(self, candidate: Candidate, streamed: str | None) -> list[dict[str, Any]]:
        """The deltas of ``candidate`` not streamed yet: its role if none was sent, then the text the
        decoder did not hand on (a structured candidate's whole JSON) or its tool calls."""
        out: list[dict[str, Any]] = []
        if streamed is None:
            out.append({"role": "assistant", "content": ""})
            streamed = ""
        if candidate.tool_calls:
            calls = [
                {
                    "index": i,
                    "id": call.id or f"call_{completion_id()[9:]}",
                    "type": "function",
                    "function": {"name": call.name, "arguments": call.arguments_json},
                }
                for i, call in enumerate(candidate.tool_calls)
            ]
            out.append({"tool_calls": calls})
        elif candidate.text.startswith(streamed) and len(candidate.text) > len(streamed):
            out.append({"content": candidate.text[len(streamed) :]})
        return out

    def _chunk(
        self,
        index: int,
        delta: dict[str, Any],
        *,
        finish: str | None = None,
        candidate: Candidate | None = None,
    ) -> bytes:
        choice: dict[str, Any] = {"index": index, "delta": delta, "finish_reason": finish}
        if candidate is not None and self._top_logprobs is not None:
            # The whole choice's logprobs once, in its last chunk: an accumulating client gets the same.
            choice["logprobs"] = logprobs_of(candidate, self._top_logprobs)
        return _event({**self._head, "choices": [choice]})


def _usage(candidates: Sequence[Candidate]) -> dict[str, int]:
    # The prompt is read once for all the choices, as OpenAI counts it.
    prompt = max((c.usage.input_tokens for c in candidates), default=0)
    out = sum(c.usage.output_tokens for c in candidates)
    return {"prompt_tokens": prompt, "completion_tokens": out, "total_tokens": prompt + out}


def _event(body: dict[str, Any]) -> bytes:
    return b"data: " + orjson.dumps(body) + b"\n\n"
