"""Any OpenAI-compatible chat-completions server (OpenAI, vLLM, SGLang, llama.cpp, Ollama) via ``openai``.

k candidates come from one request with ``n=k`` when the server honours ``n``; llama.cpp's server answers
``n=2`` with one choice, so the backend notices the shortfall, remembers it, and draws the rest as
parallel single requests with distinct seeds.

What a server refuses outright (a capability error, see :mod:`retryctl.models._openai_caps`) is learnt
in its :class:`ServerCapabilities` and the request goes again at once without it: structured output
steps down ``json_schema`` → ``json_object`` → plain prompt (:mod:`retryctl.models._openai_modes`), a
refused ``logprobs``, ``seed``, ``n``, ``top_p``, ``top_k`` or ``min_p`` is left out, and so is a refused
grammar field (:mod:`retryctl.models._openai_grammar`).
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import json
import math
import os
import random
import time
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from typing import Any, Literal

from retryctl.exceptions import ConfigError, MissingExtra

try:
    import openai
except ModuleNotFoundError as exc:  # the `openai` extra: the core install has no OpenAI client
    raise MissingExtra(feature="OpenAIBackend", extra="openai", module=exc.name) from exc

from retryctl._log import get_logger
from retryctl.models._base import BackendBase, check_k
from retryctl.models._errors import UnsupportedParameter
from retryctl.models._messages import Message, MessagesLike, normalise_messages
from retryctl.models._openai_caps import CapabilityRegistry, ServerCapabilities
from retryctl.models._openai_grammar import GrammarDialect, check_dialect, grammar_plan, refused_field
from retryctl.models._openai_modes import (
    DROPPABLE,
    Plan,
    feature_of,
    plan_for,
    sent_names,
    usable_or_raise,
)
from retryctl.models._openai_stages import PromptRenderer, StageMode, check_stage_mode, staged_sample
from retryctl.models._openai_stream import UNREPORTED_PROMPT, StreamReader
from retryctl.models._openai_wire import parse_completion, translate_error
from retryctl.models._propagation import trace_headers
from retryctl.models._retry import RetrySettings, Sleep, call_with_retries
from retryctl.models._types import Candidate, SamplingParams

__all__ = ["NMode", "OpenAIBackend"]

NMode = Literal["auto", "native", "parallel"]
"""``auto`` detects whether the server honours ``n``; ``native`` trusts it; ``parallel`` never sends it."""

_log = get_logger("retryctl.models")
_SEED_SPACE = 2**31
_REQUESTS_PER_CLIENT = 8
"""Requests in flight on one HTTP client before the next takes more (see :class:`_Clients`)."""
_PROMPTS_KEPT = 256
"""Prompts whose token count the backend remembers, for samples whose stream was cut before its usage."""


class _Clients:
    """The HTTP clients of one event loop, each taking up to ``_REQUESTS_PER_CLIENT`` requests at once.

    httpx's connection pool walks all its connections, probing every idle socket, each time a request
    starts and ends, so its CPU cost per request grows with the connections it holds: at 64 concurrent
    requests on one client that was 0.8 ms per request, 15 % of a batch task's CPU
    (``bench/batch_throughput.py``; upstream: pydantic/httpx2#1169). A request takes the first client
    with room, so a serial caller keeps using one client (and its keep-alive connection), and 64
    concurrent requests use eight pools of eight connections. Clients are made when first needed.
    """

    def __init__(self, make: Callable[[], openai.AsyncOpenAI]) -> None:
        self._make = make
        self.clients: list[openai.AsyncOpenAI] = []
        self.in_flight: list[int] = []

    @contextmanager
    def lease(self) -> Iterator[openai.AsyncOpenAI]:
        """A client for one request, counted in flight until the request ends."""
        counts = self.in_flight  # the lists this request counts in, even if aclose replaces them
        index = next((i for i, n in enumerate(counts) if n < _REQUESTS_PER_CLIENT), len(counts))
        if index == len(counts):
            self.clients.append(self._make())
            counts.append(0)
        counts[index] += 1
        try:
            yield self.clients[index]
        finally:
            counts[index] -= 1

    async def aclose(self) -> None:
        """Close every client."""
        clients, self.clients, self.in_flight = self.clients, [], []
        for client in clients:
            await client.close()


class OpenAIBackend(BackendBase):
    """Samples from an OpenAI-compatible server.

    ``api_key`` defaults to ``$OPENAI_API_KEY``, else a placeholder that local servers ignore.
    Without ``client`` the backend makes its own ``AsyncOpenAI`` clients, one per eight requests in
    flight on each event loop (see :class:`_Clients`). ``client`` may be given to share an
    ``AsyncOpenAI`` instead; it must then have ``max_retries=0`` so that retries stay with
    :class:`RetrySettings`. ``sleep`` replaces ``asyncio.sleep`` between retries
    (tests record the waits instead of sleeping). ``capabilities`` is where what the server refuses is
    remembered, keyed by base URL and model; by default the process-wide
    :meth:`CapabilityRegistry.shared`, so every backend of one server learns it once.
    ``grammar_dialect`` names the fields ``SamplingParams.grammar`` travels in (``"auto"``/``"llama.cpp"``,
    ``"vllm"``, ``"vllm-guided"``, ``"sglang"``, ``None``: none), see :mod:`retryctl.models._openai_grammar`.
    ``stage_mode`` says how a staged sample (``SamplingParams.stages``) continues a partial answer on
    this server: ``"continue"`` (vLLM, SGLang, llama.cpp's ``llama-server``) or ``"completions"`` with
    ``render_prompt``, the chat template (llama-cpp-python's server); see :mod:`._openai_stages`.
    """

    def __init__(
        self,
        *,
        model: str,
        base_url: str | None = None,
        api_key: str | None = None,
        timeout_s: float = 60.0,
        retry: RetrySettings | None = None,
        n_mode: NMode = "auto",
        client: openai.AsyncOpenAI | None = None,
        sleep: Sleep | None = None,
        extra_body: dict[str, Any] | None = None,
        capabilities: CapabilityRegistry | None = None,
        grammar_dialect: GrammarDialect | None = "auto",
        stage_mode: StageMode | None = None,
        render_prompt: PromptRenderer | None = None,
    ) -> None:
        super().__init__()
        check_stage_mode(stage_mode, render_prompt)
        if not model:
            raise ConfigError(field="model", value=model, problem="must name the served model")
        if (
            isinstance(timeout_s, bool)
            or not isinstance(timeout_s, int | float)
            or not 0 < timeout_s < math.inf
        ):
            raise ConfigError(field="timeout_s", value=timeout_s, problem="must be a finite number > 0")
        if n_mode not in ("auto", "native", "parallel"):
            raise ConfigError(field="n_mode", value=n_mode, problem="must be auto|native|parallel")
        self.model = model
        self.base_url = base_url
        self.timeout_s = timeout_s
        self.retry = retry or RetrySettings()
        self.n_mode: NMode = n_mode
        self.grammar_dialect: GrammarDialect | None = check_dialect(grammar_dialect)
        self.extra_body = dict(extra_body or {})
        self.stage_mode: StageMode | None = stage_mode
        """How a staged sample's request continues the text so far (:mod:`._openai_stages`)."""
        self.render_prompt = render_prompt
        """The chat template, for ``stage_mode="completions"``."""
        self._api_key = api_key or os.environ.get("OPENAI_API_KEY") or "not-needed"
        self._shared_client = client
        self._sleep = sleep
        # Clients per event loop: an async HTTP pool must not cross loops.
        self._clients: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Clients] = (
            weakref.WeakKeyDictionary()
        )
        registry = capabilities or CapabilityRegistry.shared()
        self.capabilities: ServerCapabilities = registry.server(self._server_url(), model)
        """What this server was found to refuse, shared with every backend of the same server."""
        # Prompt tokens the server reported per prompt sent: a stream cut short never reaches its usage
        # chunk, and its prompt was billed all the same (the budget's input tokens and cost must see it).
        self._prompt_tokens: dict[str, int] = {}
        self.honours_n: bool | None = {"auto": None, "native": True, "parallel": False}[n_mode]
        """Whether the server returns n choices for ``n``; learnt on the first k > 1 call in auto mode."""
        if n_mode == "auto" and "n" in self.capabilities.refused:
            self.honours_n = False

    @property
    def name(self) -> str:
        return self.model

    def _server_url(self) -> str:
        if self._shared_client is not None:
            return str(self._shared_client.base_url)
        return self.base_url or os.environ.get("OPENAI_BASE_URL") or "(the openai default)"

    def _new_client(self) -> openai.AsyncOpenAI:
        return openai.AsyncOpenAI(
            base_url=self.base_url, api_key=self._api_key, timeout=self.timeout_s, max_retries=0
        )

    @contextmanager
    def _lease(self) -> Iterator[openai.AsyncOpenAI]:
        if self._shared_client is not None:
            yield self._shared_client
            return
        loop = asyncio.get_running_loop()
        clients = self._clients.get(loop)
        if clients is None:
            clients = self._clients[loop] = _Clients(self._new_client)
        with clients.lease() as client:
            yield client

    def _payload(
        self, messages: list[Message], params: SamplingParams, n: int, seed: int, plan: Plan
    ) -> dict[str, Any]:
        knobs: dict[str, Any] = {"seed": seed, "n": n if n > 1 else None, "top_p": params.top_p}
        if params.logprobs:
            knobs["logprobs"] = True
        payload: dict[str, Any] = {
            "model": self.model,
            "messages": plan.messages(messages, params),
            "temperature": params.temperature,
            "max_tokens": params.max_tokens,
        }
        payload.update({k: v for k, v in knobs.items() if v is not None and k not in plan.refused})
        if "logprobs" in payload and params.top_logprobs:
            payload["top_logprobs"] = params.top_logprobs
        if params.stop:
            payload["stop"] = list(params.stop)
        if _cuts(params, plan):
            payload["stream"] = True
            if "stream_options" not in plan.refused:
                # The usage chunk comes last: a stream read to its end says what the call cost.
                payload["stream_options"] = {"include_usage": True}
        payload.update(plan.structure(params))
        # Not in OpenAI's API; llama.cpp, vLLM and SGLang read them from the body. Merged last, so they
        # win over the fields above, as the SDK's ``extra_body`` does.
        payload.update(self.extra_body)
        for name in ("top_k", "min_p"):
            value = getattr(params, name)
            if value is not None and name not in plan.refused:
                payload[name] = value
        return payload

    async def _once(self, payload: dict[str, Any], seed: int) -> list[Candidate]:
        started = time.perf_counter()
        try:
            # The SDK's own POST, not ``chat.completions.create``: the body is already plain JSON, and
            # create's type-driven transform of it (a no-op for such a body) cost about 1 ms of CPU per
            # call, a third of the SDK's cost (bench/batch_throughput.py). Headers, auth, timeouts and
            # the SDK's status errors are the same; the body is read by our parser either way.
            with self._lease() as client:
                raw = await client.post(
                    "/chat/completions",
                    body=payload,
                    cast_to=openai.HttpxBinaryResponseContent,
                    options=_traced_options(),
                )
            body = raw.text
        except openai.OpenAIError as exc:
            raise translate_error(exc, backend=self.name, sent=sent_names(payload)) from exc
        return self._parsed(body, started=started, seed=seed, status_code=raw.response.status_code)

    def _parsed(self, body: str, *, started: float, seed: int, status_code: int) -> list[Candidate]:
        latency_ms = (time.perf_counter() - started) * 1000.0
        return parse_completion(
            body,
            backend=self.name,
            model=self.model,
            latency_ms=latency_ms,
            seed=seed,
            status_code=status_code,
        )

    async def _streamed(self, payload: dict[str, Any], seed: int, bound: float | None) -> list[Candidate]:
        """One sample, streamed; the stream is closed (the server stops generating) once it is cut."""
        started = time.perf_counter()
        reader = StreamReader(backend=self.name, bound=bound)
        try:
            with self._lease() as client:
                stream = await client.post(
                    "/chat/completions",
                    body=payload,
                    cast_to=object,  # the decoded JSON of each event, validated by the reader
                    stream=True,
                    stream_cls=openai.AsyncStream[object],
                    options=_traced_options(),
                )
                try:
                    response = stream.response
                    if not response.headers.get("content-type", "").startswith("text/event-stream"):
                        # A server that ignores ``stream`` answers with the whole completion.
                        body = (await response.aread()).decode("utf-8", errors="replace")
                        return self._parsed(
                            body, started=started, seed=seed, status_code=response.status_code
                        )
                    async for event in stream:
                        if reader.add(event):
                            break
                finally:
                    await stream.close()
        except openai.OpenAIError as exc:
            raise translate_error(exc, backend=self.name, sent=sent_names(payload)) from exc
        latency_ms = (time.perf_counter() - started) * 1000.0
        return [reader.candidate(model=self.model, latency_ms=latency_ms, seed=seed)]

    async def _request(
        self, messages: list[Message], params: SamplingParams, n: int, seed: int
    ) -> list[_Read]:
        """One request, sent again at once without whatever the server refuses, until it is served."""
        while True:
            grammar = grammar_plan(params, self.grammar_dialect, self.capabilities.refused)
            sent = grammar.params
            plan = plan_for(sent, self.capabilities.refused)
            payload = grammar.apply(self._payload(messages, sent, n, seed, plan), self.extra_body)
            once = functools.partial(self._once, payload, seed)
            if "stream" in payload:
                once = functools.partial(self._streamed, payload, seed, params.cut_below)
            try:
                got = await call_with_retries(
                    once,
                    self.retry,
                    sleep=self._sleep,
                    label=self.name,
                )
            except UnsupportedParameter as exc:
                if not self._learn(exc, payload, plan):
                    raise
                continue
            if params.logprobs:  # only a sample with logprobs can be cut short
                got = self._prompt_usage(got, payload["messages"])
            dropped = _dropped_note(sent, n, plan)
            reads = [plan.read(c, sent, i) for i, c in enumerate(got)]
            reads = [(grammar.finish(c, plan.mode), p) for c, p in reads]
            return [(_with_note(c, dropped) if dropped else c, p) for c, p in reads]

    def _prompt_usage(self, got: list[Candidate], messages: list[Message]) -> list[Candidate]:
        """Remember the prompt tokens a response reports; give them to a cut stream that reports none."""
        key = hashlib.sha256(json.dumps(messages, sort_keys=True, default=str).encode()).hexdigest()
        reported = next((c.usage.input_tokens for c in got if c.usage.input_tokens > 0), None)
        if reported is not None:
            self._prompt_tokens.pop(key, None)
            self._prompt_tokens[key] = reported
            while len(self._prompt_tokens) > _PROMPTS_KEPT:
                del self._prompt_tokens[next(iter(self._prompt_tokens))]  # the oldest (dicts keep order)
            return got
        known = self._prompt_tokens.get(key)
        if known is None:
            return got
        note = "prompt tokens as the server reported them for this prompt before (the stream reported none)"
        return [
            replace(
                c,
                usage=replace(c.usage, input_tokens=known),
                notes=tuple(note if n == UNREPORTED_PROMPT else n for n in c.notes),
            )
            if UNREPORTED_PROMPT in c.notes
            else c
            for c in got
        ]

    def _learn(self, exc: UnsupportedParameter, payload: dict[str, Any], plan: Plan) -> bool:
        """Remember what the server refused; ``False`` when the request cannot go on without it."""
        feature = refused_field(exc.parameter, payload) or feature_of(exc.parameter, payload, plan)
        if feature is None or feature in plan.refused:
            return False
        if self.capabilities.refuse(feature):
            _log.warning(
                "backend.capability_refused",
                backend=self.name,
                server=self.capabilities.base_url,
                feature=feature,
                status=exc.status_code,
            )
        if feature == "n" and self.n_mode == "auto":
            self.honours_n = False
        return True

    async def _parallel(
        self, messages: list[Message], params: SamplingParams, seeds: list[int]
    ) -> list[_Read]:
        results = await asyncio.gather(
            *(self._request(messages, params, 1, s) for s in seeds), return_exceptions=True
        )
        reads: list[_Read] = []
        for result in results:
            # The first failure is raised only after every request ended: none is left running.
            if isinstance(result, BaseException):
                raise result
            reads.extend(result[:1])
        return reads

    async def sample(
        self, messages: MessagesLike, params: SamplingParams | None = None, *, k: int = 1
    ) -> list[Candidate]:
        """Return k candidates; raises a :class:`~retryctl.models.BackendError` subclass on failure."""
        check_k(k)
        params = params or SamplingParams()
        msgs = normalise_messages(messages)
        base = params.seed if params.seed is not None else random.randrange(_SEED_SPACE)
        seeds = [(base + i) % _SEED_SPACE for i in range(k)]
        if params.stages:
            return await staged_sample(self, msgs, params, seeds)
        # A stream is read (and cut) per sample: one choice per request.
        if k == 1 or self.honours_n is False or _cuts(params, plan_for(params, self.capabilities.refused)):
            return usable_or_raise(await self._parallel(msgs, params, seeds), backend=self.name)
        first = await self._request(msgs, params, k, seeds[0])
        if len(first) >= k:
            self.honours_n = True
            return usable_or_raise(first[:k], backend=self.name)
        if self.n_mode == "auto":
            self.honours_n = False
        if self.n_mode == "auto" and "n" not in self.capabilities.refused:
            _log.info("backend.n_ignored", backend=self.name, asked=k, got=len(first))
        note = f"server ignored n={k} (returned {len(first)}); sampled separately with its own seed"
        rest = await self._parallel(msgs, params, seeds[len(first) :])
        return usable_or_raise(first + [(_with_note(c, note), p) for c, p in rest], backend=self.name)

    async def aclose(self) -> None:
        """Close the HTTP clients of the running event loop."""
        clients = self._clients.pop(asyncio.get_running_loop(), None)
        if clients is not None:
            await clients.aclose()


_Read = tuple[Candidate, str | None]
"""A candidate as its mode served it, and the structure problem found in it (fallback modes only)."""


def _cuts(params: SamplingParams, plan: Plan) -> bool:
    """Whether samples are streamed to be cut short: a bound is set, its logprobs come, no tools
    (tool-call deltas are not read from a stream), and the server has not refused streaming."""
    return (
        params.cut_below is not None
        and params.logprobs
        and plan.mode != "tools"
        and not {"logprobs", "stream"} & plan.refused
    )


def _dropped_note(params: SamplingParams, n: int, plan: Plan) -> str | None:
    asked = {
        "stream": params.cut_below is not None and params.logprobs,
        "stream_options": params.cut_below is not None and params.logprobs,
        "logprobs": params.logprobs,
        "seed": True,
        "n": n > 1,
        "top_p": params.top_p is not None,
        "top_k": params.top_k is not None,
        "min_p": params.min_p is not None,
    }
    dropped = [name for name in DROPPABLE if asked[name] and name in plan.refused]
    return f"sent without {', '.join(dropped)} (the server refused them)" if dropped else None


def _with_note(candidate: Candidate, note: str) -> Candidate:
    return replace(candidate, notes=(*candidate.notes, note))


def _traced_options() -> Any:
    """The SDK request options that carry the current trace to the server (``traceparent``), when one
    is current (the attempt span of a traced step or gateway request); else none."""
    headers = trace_headers()
    return {} if headers is None else {"headers": headers}
