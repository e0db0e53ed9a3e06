"""A staged sample on an OpenAI-compatible server: one request per stage, each continuing the text so
far (:class:`~retryctl.models.Stage`).

Servers differ in how a request continues a partial answer, so the backend's ``stage_mode`` names the
way, never guessed:

- ``"continue"``: ``/chat/completions`` with the text so far as a final assistant message and
  ``continue_final_message: true, add_generation_prompt: false`` in the body (vLLM's and SGLang's
  fields; llama.cpp's own ``llama-server`` continues a final assistant message by itself).
- ``"completions"``: ``/completions`` with ``render_prompt(messages)`` (the chat template applied,
  generation prompt included) + the text so far. For llama-cpp-python's ``llama_cpp.server``: its chat
  formatter (``Jinja2ChatFormatter``) always renders a final assistant message as a closed turn and
  then opens a new one, so its chat endpoint cannot continue; its completions endpoint can, and its
  ``Llama.generate`` keeps the KV cache of the longest prefix it already holds, so a stage re-evaluates
  little of the prompt (``bench/stage_prefix_cache.py`` measures it).

A stage's ``end`` strings are its stop strings; servers cut a stop string from the text, so the one
matched (``stop_reason`` where the server names it, else ``end[0]``) is put back when a stage follows,
and so is ``end[0]`` after a stage that ended without one. Staged samples are not streamed:
``cut_below`` is not applied to them (a note says so).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import openai

from retryctl.exceptions import ConfigError
from retryctl.models._messages import Message
from retryctl.models._openai_wire import parse_completion, translate_error
from retryctl.models._retry import call_with_retries
from retryctl.models._stages import Stage, StageOutcome
from retryctl.models._types import Candidate, SamplingParams, TokenLogprob, Usage

if TYPE_CHECKING:
    from retryctl.models import OpenAIBackend  # the package, not _openai: that module imports this one

__all__ = [
    "STAGE_MODES",
    "PromptRenderer",
    "StageMode",
    "check_stage_mode",
    "gguf_renderer",
    "set_stage_mode",
    "staged_sample",
]

StageMode = Literal["continue", "completions"]
"""How a server is asked to continue a partial answer (see the module docstring)."""

PromptRenderer = Callable[[list[Message]], str]
"""The chat template applied to messages, generation prompt included (``"completions"`` mode)."""

STAGE_MODES: tuple[StageMode, ...] = ("continue", "completions")
"""Every ``stage_mode``."""

_SEED_SPACE = 2**31
_STAGE_SEED_STRIDE = 7_919  # as the embedded backend: stage n draws with seed + n·stride


def check_stage_mode(mode: StageMode | None, render: PromptRenderer | None) -> None:
    """``ConfigError`` for an unknown mode, or ``"completions"`` without a renderer."""
    if mode not in (None, "continue", "completions"):
        raise ConfigError(field="stage_mode", value=mode, problem="must be 'continue' or 'completions'")
    if mode == "completions" and render is None:
        raise ConfigError(
            field="render_prompt", value=None, problem="stage_mode='completions' renders the prompt itself"
        )


def gguf_renderer(path: str | Path) -> PromptRenderer:
    """The chat template of the GGUF file at ``path`` (the one a llama.cpp server serves), as
    ``stage_mode="completions"`` needs it: read with the file's vocabulary only, not its weights."""
    from retryctl.models._embedded import EmbeddedBackend
    from retryctl.models._local import import_llama_cpp

    llama = import_llama_cpp().Llama(model_path=str(path), vocab_only=True, verbose=False)
    return EmbeddedBackend(llama=llama).render_prompt


def set_stage_mode(backend: OpenAIBackend, mode: StageMode | None, render: PromptRenderer | None) -> None:
    """Give a built backend its ``stage_mode`` and ``render_prompt``, checked as its constructor does
    (for a backend a caller did not construct: the demo's, a Ray worker's)."""
    check_stage_mode(mode, render)
    backend.stage_mode, backend.render_prompt = mode, render


@dataclass
class _Reply:
    text: str
    logprobs: tuple[TokenLogprob, ...] | None
    finish_reason: str
    usage: Usage
    matched: str | None
    evaluated: int


def _completion_reply(body: str, backend: str, status_code: int) -> _Reply:
    """The first choice of a ``/completions`` body (the legacy logprobs shape)."""
    try:
        data = json.loads(body)
        choice = data["choices"][0]
        text = str(choice.get("text") or "")
    except (json.JSONDecodeError, KeyError, IndexError, TypeError, AttributeError) as exc:
        from retryctl.models._errors import MalformedResponse

        raise MalformedResponse(
            f"not a completion: {exc}", backend=backend, body=body, status_code=status_code
        ) from exc
    raw = choice.get("logprobs") or {}
    tokens, lps = raw.get("tokens") or [], raw.get("token_logprobs") or []
    tops = raw.get("top_logprobs") or [None] * len(tokens)
    logprobs = tuple(
        TokenLogprob(
            token=str(t),
            logprob=float(lp),
            top=tuple(sorted(((str(a), float(b)) for a, b in (top or {}).items()), key=lambda x: -x[1])),
        )
        for t, lp, top in zip(tokens, lps, tops, strict=False)
        if lp is not None
    )
    usage, evaluated = _usage(data.get("usage") or {})
    return _Reply(
        text=text,
        logprobs=logprobs if raw else None,
        finish_reason=str(choice.get("finish_reason") or "stop"),
        usage=usage,
        matched=choice.get("stop_reason") if isinstance(choice.get("stop_reason"), str) else None,
        evaluated=evaluated,
    )


def _usage(usage: dict[str, Any]) -> tuple[Usage, int]:
    """The tokens billed, and the prompt tokens evaluated: those billed less any the server says it
    had cached (vLLM's ``prompt_tokens_details.cached_tokens``); a server that does not say (llama.cpp)
    is taken at its bill, an upper bound."""
    prompt = int(usage.get("prompt_tokens") or 0)
    cached = (usage.get("prompt_tokens_details") or {}).get("cached_tokens")
    return Usage(prompt, int(usage.get("completion_tokens") or 0)), prompt - int(cached or 0)


def _payload(
    backend: OpenAIBackend,
    messages: list[Message],
    *,
    so_far: str,
    params: SamplingParams,
    stage: Stage,
    seed: int,
    last: bool,
) -> tuple[str, dict[str, Any]]:
    """The path and body of one stage's request."""
    refused = backend.capabilities.refused
    body: dict[str, Any] = {
        "model": backend.model,
        "temperature": stage.temperature if stage.temperature is not None else params.temperature,
        "max_tokens": stage.max_tokens,
        "seed": seed,
    }
    for name in ("top_p", "top_k", "min_p"):
        value = getattr(stage, name)
        value = value if value is not None else getattr(params, name)
        if value is not None and name not in refused:
            body[name] = value
    stop = [*stage.end, *(params.stop if last else ())]
    if stop:
        body["stop"] = stop
    if backend.stage_mode == "completions":
        assert backend.render_prompt is not None
        body["prompt"] = backend.render_prompt(messages) + so_far
        if params.logprobs:
            body["logprobs"] = max(1, params.top_logprobs)
        return "/completions", {**body, **backend.extra_body}
    body["messages"] = messages
    if so_far:
        body["messages"] = [*messages, {"role": "assistant", "content": so_far}]
        body["continue_final_message"], body["add_generation_prompt"] = True, False
    if params.logprobs:
        body["logprobs"] = True
        if params.top_logprobs:
            body["top_logprobs"] = params.top_logprobs
    return "/chat/completions", {**body, **backend.extra_body}


async def _request(backend: OpenAIBackend, path: str, body: dict[str, Any], seed: int) -> _Reply:
    async def once() -> _Reply:
        try:
            with backend._lease() as client:
                raw = await client.post(path, body=body, cast_to=openai.HttpxBinaryResponseContent)
        except openai.OpenAIError as exc:
            raise translate_error(exc, backend=backend.name, sent=tuple(body)) from exc
        status = raw.response.status_code
        if path == "/completions":
            return _completion_reply(raw.text, backend.name, status)
        [cand] = parse_completion(
            raw.text, backend=backend.name, model=backend.model, latency_ms=0.0, seed=seed, status_code=status
        )[:1]
        data = json.loads(raw.text)
        choice = data["choices"][0]
        matched = choice.get("stop_reason")
        usage, evaluated = _usage(data.get("usage") or {})
        return _Reply(
            text=cand.text,
            logprobs=cand.logprobs,
            finish_reason=cand.finish_reason or "stop",
            usage=usage,
            matched=matched if isinstance(matched, str) else None,
            evaluated=evaluated,
        )

    return await call_with_retries(once, backend.retry, sleep=backend._sleep, label=backend.name)


async def _one(
    backend: OpenAIBackend, messages: list[Message], params: SamplingParams, seed: int
) -> Candidate:
    started = time.perf_counter()
    so_far = ""
    outcomes: list[StageOutcome] = []
    logprobs: list[TokenLogprob] = []
    usage = Usage()
    for n, stage in enumerate(params.stages):
        last = n == len(params.stages) - 1
        so_far += stage.start
        stage_seed = (seed + n * _STAGE_SEED_STRIDE) % _SEED_SPACE
        path, body = _payload(
            backend, messages, so_far=so_far, params=params, stage=stage, seed=stage_seed, last=last
        )
        reply = await _request(backend, path, body, stage_seed)
        text = stage.start + reply.text
        met = reply.matched if reply.matched is not None and reply.matched in stage.end else None
        if met is not None:
            text += met  # the server cut the end string it met: it is kept in the text
        elif not last and stage.end:
            # The server met none that it names (the end of text, its cap, or a server that does
            # not say which stop string it met): close the stage so the next continues after it.
            text += stage.end[0]
        so_far += text[len(stage.start) :]
        usage += reply.usage
        logprobs.extend(reply.logprobs or ())
        outcomes.append(
            StageOutcome(
                stage.name,
                text,
                reply.usage.output_tokens,
                reply.finish_reason,
                prompt_tokens=reply.evaluated,
            )
        )
    notes = ("cut_below not applied: staged samples are not streamed",) if params.cut_below else ()
    return Candidate(
        text=so_far,
        model=backend.model,
        logprobs=tuple(logprobs) if params.logprobs else None,
        finish_reason=outcomes[-1].finish_reason,
        usage=usage,
        latency_ms=(time.perf_counter() - started) * 1000.0,
        seed=seed,
        notes=notes,
        stages=tuple(outcomes),
    )


async def staged_sample(
    backend: OpenAIBackend, messages: list[Message], params: SamplingParams, seeds: list[int]
) -> list[Candidate]:
    """One staged candidate per seed, drawn concurrently (each one's stages in turn)."""
    if backend.stage_mode is None:
        raise ConfigError(
            field="stage_mode",
            value=None,
            problem="say how this server continues a partial answer: 'continue' (vLLM, SGLang, "
            "llama.cpp's llama-server) or 'completions' with render_prompt (llama_cpp.server)",
        )
    if params.tools or params.wants_json or params.grammar is not None:
        raise ConfigError(
            field="stages",
            value=tuple(s.name for s in params.stages),
            problem="stages are sampled as plain text only (no tools, JSON or grammar)",
        )
    results = await asyncio.gather(
        *(_one(backend, messages, params, s) for s in seeds), return_exceptions=True
    )
    for result in results:
        if isinstance(result, BaseException):
            raise result
    return [r for r in results if isinstance(r, Candidate)]
