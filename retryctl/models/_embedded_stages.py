"""A staged sample on the embedded model: one decoding run per stage, each continuing the KV cache of
the prompt and the stages before it.

Each stage's run is handed the tokens so far (prompt, then every earlier stage's own tokens, then the
stage's ``start`` text): ``Llama.generate`` keeps the longest prefix it already holds in its KV cache
and evaluates only the rest, so a stage re-evaluates the previous stage's last token (sampled, never
evaluated) and its own ``start`` and ``end`` texts, not the prompt. :func:`evaluated_tokens` counts
what it will evaluate by the same rule, reported as the stage's ``prompt_tokens``
(``bench/stage_prefix_cache.py`` prints them). The generated tokens are carried as token ids, not
re-tokenised text, so the cache prefix holds.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

from retryctl._cut import CutWatch
from retryctl.models._stages import Stage, StageOutcome
from retryctl.models._types import CUT_WINDOW, Candidate, SamplingParams, TokenLogprob, Usage

if TYPE_CHECKING:
    from retryctl.models import EmbeddedBackend  # the package, not _embedded: that module imports this one
    from retryctl.models._text_sink import TextSink

__all__ = ["evaluated_tokens", "stage_params", "staged_candidate"]

_SEED_SPACE = 2**31
_STAGE_SEED_STRIDE = 7_919  # stage n of a sample draws with seed + n·stride: its own stream per stage


def stage_params(params: SamplingParams, stage: Stage, *, last: bool) -> SamplingParams:
    """The parameters of one stage's request: the stage's knobs over the draw's, its cap as
    ``max_tokens``, and the draw's ``stop`` only on the last stage (a stage's ``end`` strings are
    passed apart, since they are kept in the text)."""
    return replace(
        params,
        temperature=stage.temperature if stage.temperature is not None else params.temperature,
        top_p=stage.top_p if stage.top_p is not None else params.top_p,
        top_k=stage.top_k if stage.top_k is not None else params.top_k,
        min_p=stage.min_p if stage.min_p is not None else params.min_p,
        max_tokens=stage.max_tokens,
        stop=params.stop if last else (),
        stages=(),
    )


def evaluated_tokens(llm: Any, tokens: list[int]) -> int:
    """How many of ``tokens`` ``llm.generate`` will evaluate, its KV cache reused where it can: the
    rule of llama-cpp-python's ``Llama.generate`` (the longest cached prefix is kept, less one token
    when the whole prompt is cached, so that the logits are fresh)."""
    held = list(llm._input_ids) if llm.n_tokens > 0 else []
    prefix = 0
    for a, b in zip(held, tokens, strict=False):
        if a != b:
            break
        prefix += 1
    if prefix == len(tokens) and len(held) == len(tokens) and not getattr(llm, "_requires_eval", True):
        return 0
    reuse = prefix - 1 if prefix == len(tokens) else prefix
    return len(tokens) - reuse if reuse > 0 else len(tokens)


def _tokens(backend: EmbeddedBackend, text: str) -> list[int]:
    if not text:
        return []
    ids: list[int] = backend._llm.tokenize(text.encode("utf-8"), add_bos=False, special=True)
    return ids


def _kept_ids(backend: EmbeddedBackend, ids: list[int], text: str) -> list[int]:
    """``ids`` that spell ``text`` exactly: where a kept end string ended inside the last token, that
    token is replaced by the tokens of what of it the text keeps."""
    pieces = [backend._piece(t) for t in ids]
    data = text.encode("utf-8")
    if b"".join(pieces) == data or not ids:
        return ids
    head = len(b"".join(pieces[:-1]))
    return ids[:-1] + _tokens(backend, data[head:].decode("utf-8", errors="replace"))


def staged_candidate(
    backend: EmbeddedBackend,
    prompt: list[int],
    params: SamplingParams,
    seed: int,
    *,
    emit: TextSink | None = None,
    index: int = 0,
) -> Candidate:
    """One candidate decoded in ``params.stages`` (see the module docstring). A stage that ends
    without one of its ``end`` strings (its cap, or the end of text) gets ``end[0]`` appended when a
    stage follows; a stage cut by ``cut_below`` ends the sample (one cut watch runs across stages)."""
    llm = backend._llm
    context = list(prompt)
    watch = CutWatch(params.cut_below, CUT_WINDOW) if params.cut_below and params.logprobs else None
    outcomes: list[StageOutcome] = []
    logprobs: list[TokenLogprob] = []
    inserted = generated = 0
    latency_ms = 0.0
    finish = "stop"
    for n, stage in enumerate(params.stages):
        last = n == len(params.stages) - 1
        opening = _tokens(backend, stage.start)
        context += opening
        evaluated = evaluated_tokens(llm, context)
        run = backend._decode(
            context,
            stage_params(params, stage, last=last),
            (seed + n * _STAGE_SEED_STRIDE) % _SEED_SPACE,
            None,
            keep=stage.end,
            watch=watch,
        )
        text = stage.start + run.text
        context += _kept_ids(backend, run.ids, run.text)
        closed = any(run.text.endswith(e) for e in stage.end)
        if not last and stage.end and not closed and run.finish_reason != "cut":
            # The next stage continues after a closed stage, as the model would have written it.
            text += stage.end[0]
            closing = _tokens(backend, stage.end[0])
            context += closing
            inserted += len(closing)
        inserted += len(opening)
        generated += run.output_tokens
        latency_ms += run.latency_ms
        logprobs.extend(run.logprobs or ())
        finish = run.finish_reason
        outcomes.append(StageOutcome(stage.name, text, run.output_tokens, finish, prompt_tokens=evaluated))
        if emit is not None and text and not emit(index, text):
            break  # the caller went away
        if finish == "cut":
            break
    return Candidate(
        text="".join(o.text for o in outcomes),
        model=backend.name,
        logprobs=tuple(logprobs) if params.logprobs else None,
        finish_reason=finish,
        # The prompt once, and the delimiter texts the stages put in: what the model read but did
        # not write (its own tokens are read back from the cache).
        usage=Usage(len(prompt) + inserted, generated),
        latency_ms=latency_ms,
        seed=seed,
        stages=tuple(outcomes),
    )
