"""A streamed chat completion read chunk by chunk, so that a sample can be cut short mid-stream.

Samples cut short (``SamplingParams.cut_below``) need each token's logprob while the server is still
generating: :class:`StreamReader` takes the stream's chunks one at a time, feeds their logprobs to the
same :class:`~retryctl._cut.CutWatch` the embedded decoder uses, and says when to close the stream.
Closing the HTTP response is what stops a server generating: llama.cpp's Python server checks for a
client gone away between chunks and ends the request (vLLM aborts such a request too). The chunks are
validated here, leniently, like whole bodies in :mod:`retryctl.models._openai_wire`.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field, ValidationError

from retryctl._cut import CutWatch
from retryctl.models._errors import MalformedResponse, TransientBackendError
from retryctl.models._openai_wire import Logprobs, WireModel, WireUsage, first_error, token_logprobs
from retryctl.models._types import CUT_WINDOW, Candidate, TokenLogprob, Usage

__all__ = ["UNREPORTED_PROMPT", "StreamReader"]

UNREPORTED_PROMPT = "the stream reported no usage: output tokens counted as read, prompt tokens unknown"
"""The note of a streamed sample whose usage the server never sent (a cut stream never gets to it)."""


class _Delta(WireModel):
    content: str | None = None


class _ChunkChoice(WireModel):
    index: int = 0
    delta: _Delta = Field(default_factory=_Delta)
    finish_reason: str | None = None
    logprobs: Logprobs | None = None


class _Chunk(WireModel):
    choices: list[_ChunkChoice] = Field(default_factory=list)
    usage: WireUsage | None = None


class StreamReader:
    """Reads one choice's chunks; :meth:`add` returns ``True`` once the sample is to be cut.

    ``bound`` is ``SamplingParams.cut_below`` (``None``: read to the end, never cut).
    """

    def __init__(self, *, backend: str, bound: float | None) -> None:
        self.backend = backend
        self.watch = CutWatch(bound, CUT_WINDOW) if bound is not None else None
        self.text: list[str] = []
        self.logprobs: list[TokenLogprob] = []
        self.finish_reason: str | None = None
        self.usage: Usage | None = None
        self.chunks = 0

    def add(self, event: Any) -> bool:
        """Take one decoded server-sent event; ``True`` when the stream is to be closed now (cut)."""
        try:
            chunk = _Chunk.model_validate(event)
        except ValidationError as exc:
            raise MalformedResponse(
                f"not a chat-completion chunk: {first_error(exc, 'chunk')}",
                backend=self.backend,
                body=str(event),
            ) from exc
        self.chunks += 1
        if chunk.usage is not None:
            self.usage = Usage(chunk.usage.prompt_tokens, chunk.usage.completion_tokens)
        for choice in chunk.choices:
            if choice.index != 0:
                continue  # one request per sample: n is never sent on a stream
            if choice.delta.content:
                self.text.append(choice.delta.content)
            if choice.finish_reason is not None:
                self.finish_reason = choice.finish_reason
            for token in token_logprobs(choice.logprobs) or ():
                self.logprobs.append(token)
                if self.watch is not None and self.watch.add(token.logprob):
                    self.finish_reason = "cut"
                    return True
        return False

    def candidate(self, *, model: str, latency_ms: float, seed: int | None) -> Candidate:
        """The sample as read: whole, or up to the chunk that cut it. A stream that ended before a
        finish reason was broken off (llama.cpp's server ends one when another request comes, unless
        started with ``--interrupt_requests False``): a transient fault, worth drawing again."""
        if self.finish_reason is None:
            raise TransientBackendError(
                f"the stream ended before a finish reason ({self.chunks} chunks read); llama.cpp's "
                "Python server ends a stream when another request arrives unless started with "
                "--interrupt_requests False",
                backend=self.backend,
            )
        notes: tuple[str, ...] = ()
        usage = self.usage
        if usage is None:
            # A stream cut before its usage chunk (or from a server that sends none) reports no
            # usage: the output is the tokens read, the prompt unknown.
            usage = Usage(0, len(self.logprobs) or len(self.text))
            notes = (UNREPORTED_PROMPT,)
        return Candidate(
            text="".join(self.text),
            model=model,
            logprobs=tuple(self.logprobs) if self.logprobs else None,
            finish_reason=self.finish_reason,
            usage=usage,
            latency_ms=latency_ms,
            seed=seed,
            notes=notes,
        )
