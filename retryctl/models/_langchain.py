"""Any LangChain ``BaseChatModel`` as a backend.

k candidates are k concurrent ``ainvoke`` calls (each with its own seed when sampling knobs are passed).
Logprobs are read from the reply's ``response_metadata["logprobs"]`` when the model puts them there (as
``ChatOpenAI(logprobs=True)`` does); usage from ``usage_metadata``; tool calls from ``tool_calls``.
A LangChain model takes no grammar in general: a candidate asked for one says so in its notes and its
check runs after decoding, unless ``to_kwargs`` put the grammar in the request itself
(:func:`llama_cpp_style_kwargs`, for ``ChatOpenAI`` pointing at a llama.cpp server).
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from collections.abc import Callable, Mapping
from typing import Any

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, convert_to_messages

from retryctl.exceptions import ConfigError
from retryctl.models._base import BackendBase, check_k
from retryctl.models._client_retries import without_client_retries
from retryctl.models._errors import (
    BackendError,
    BackendTimeout,
    MalformedResponse,
    TerminalBackendError,
    TransientBackendError,
    UnclassifiedBackendError,
)
from retryctl.models._messages import MessagesLike, normalise_messages
from retryctl.models._output_limit import output_token_limit
from retryctl.models._types import Candidate, SamplingParams, TokenLogprob, ToolCall, Usage

__all__ = [
    "LangChainBackend",
    "ParamsToKwargs",
    "llama_cpp_style_kwargs",
    "openai_style_kwargs",
    "stop_only_kwargs",
]

ParamsToKwargs = Callable[[SamplingParams, int | None], dict[str, Any]]
"""Maps sampling parameters (and a candidate's seed) to the model's call kwargs."""


def stop_only_kwargs(params: SamplingParams, seed: int | None) -> dict[str, Any]:
    """Pass only ``stop``: the model keeps the temperature and the like it was built with."""
    return {"stop": list(params.stop)} if params.stop else {}


def openai_style_kwargs(params: SamplingParams, seed: int | None) -> dict[str, Any]:
    """Call kwargs in the OpenAI request shape, which ``ChatOpenAI`` and its kin put in the payload."""
    kwargs: dict[str, Any] = {"temperature": params.temperature, "max_tokens": params.max_tokens}
    if seed is not None:
        kwargs["seed"] = seed
    if params.top_p is not None:
        kwargs["top_p"] = params.top_p
    if params.logprobs:
        kwargs["logprobs"] = True
        if params.top_logprobs:
            kwargs["top_logprobs"] = params.top_logprobs
    if params.stop:
        kwargs["stop"] = list(params.stop)
    if params.response_format is not None:
        kwargs["response_format"] = dict(params.response_format)
    return kwargs


def llama_cpp_style_kwargs(params: SamplingParams, seed: int | None) -> dict[str, Any]:
    """:func:`openai_style_kwargs` plus the grammar as llama.cpp's ``grammar`` field (in ``extra_body``,
    which ``ChatOpenAI`` merges into the request): a GBNF grammar as it is, a regex converted to GBNF
    (with the ``local`` extra); never one llama.cpp cannot parse. Only for a server that takes the field:
    another refuses the request."""
    kwargs = openai_style_kwargs(params, seed)
    grammar = params.grammar
    if grammar is None or grammar.json_schema is not None:
        return kwargs
    from retryctl.models._gbnf import server_gbnf

    try:
        gbnf = server_gbnf(grammar.gbnf, grammar.regex)
    except ValueError:
        return kwargs  # not sent (llama.cpp's server would crash on it): the candidate's notes say so
    kwargs.pop("response_format", None)  # a grammar replaces the format's constraint
    kwargs["extra_body"] = {**kwargs.get("extra_body", {}), "grammar": gbnf}
    return kwargs


def _grammar_outcome(params: SamplingParams, kwargs: Mapping[str, Any]) -> tuple[str | None, str | None]:
    """The name of the grammar the call carried (``None`` if none) and the note a candidate gets."""
    grammar = params.grammar
    if grammar is None:
        return None, None
    body = kwargs.get("extra_body")
    if isinstance(body, Mapping) and body.get("grammar") is not None:
        note = f"decoded under grammar {grammar.name!r} (strictness {grammar.strictness:.2f}) by the server"
        return grammar.name, note
    return None, f"grammar {grammar.name!r} not supported by this backend: checked after decoding"


def _refuse_stages(params: SamplingParams) -> None:
    if params.stages:
        # A chat model's runnable takes messages and returns a whole reply: it cannot be told to go on
        # from a partial assistant text, nor have its knobs changed between two parts of one answer.
        raise ConfigError(
            field="stages",
            value=tuple(s.name for s in params.stages),
            problem="a LangChain chat model cannot continue a partial answer; sample stages with "
            "EmbeddedBackend or OpenAIBackend",
        )


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    parts = []
    for part in content or ():
        if isinstance(part, str):
            parts.append(part)
        elif isinstance(part, Mapping) and part.get("type") == "text":
            parts.append(str(part.get("text", "")))
    return "".join(parts)


def _logprobs(metadata: Mapping[str, Any]) -> tuple[TokenLogprob, ...] | None:
    """OpenAI-shaped logprobs (``{"content": [...]}`` or the bare list); ``None`` if absent or odd."""
    raw = metadata.get("logprobs")
    if isinstance(raw, Mapping):
        raw = raw.get("content")
    if not isinstance(raw, list):
        return None
    out = []
    for item in raw:
        if not isinstance(item, Mapping) or not isinstance(item.get("logprob"), int | float):
            return None
        top = tuple(
            (str(a.get("token", "")), float(a["logprob"]))
            for a in item.get("top_logprobs") or ()
            if isinstance(a, Mapping) and isinstance(a.get("logprob"), int | float)
        )
        out.append(TokenLogprob(str(item.get("token", "")), float(item["logprob"]), top))
    return tuple(out)


def _classify(exc: Exception, backend: str) -> BackendError:
    if isinstance(exc, BackendError):
        return exc
    # openai is looked up, not imported (as retryctl.controller._errors does): a program that never
    # loaded it raised none of its errors, and a LangChain agent should not pay for its import.
    openai = sys.modules.get("openai")
    if openai is not None and isinstance(exc, openai.OpenAIError):
        from retryctl.models._openai_wire import translate_error

        return translate_error(exc, backend=backend)
    if isinstance(exc, TimeoutError):
        return BackendTimeout(f"{type(exc).__name__}: {exc}", backend=backend)
    if isinstance(exc, ConnectionError):
        return TransientBackendError(f"{type(exc).__name__}: {exc}", backend=backend)
    status = getattr(exc, "status_code", None)
    message = f"{type(exc).__name__}: {exc}"
    if isinstance(status, int) and (status == 429 or status >= 500):
        return TransientBackendError(message, backend=backend, status_code=status)
    if isinstance(status, int):
        return TerminalBackendError(message, backend=backend, status_code=status)
    return UnclassifiedBackendError(message, backend=backend)  # the controller reads its cause


class LangChainBackend(BackendBase):
    """Wraps a LangChain chat model.

    ``to_kwargs`` decides which sampling knobs reach the model: :func:`stop_only_kwargs` (default)
    keeps the model's own settings; :func:`openai_style_kwargs` suits ``ChatOpenAI``-like models, and
    :func:`llama_cpp_style_kwargs` one pointing at a llama.cpp server (it sends the grammar too).
    Tools are bound with the model's ``bind_tools``. The model is called without its client's own
    retries (a copy with ``max_retries=0``: :mod:`retryctl.models._client_retries`; ``model`` itself is
    not changed): the step retries, charges and logs each HTTP try itself, where ``ChatOpenAI``'s two
    hidden retries a call would make one logged attempt three requests and their waits.
    """

    def __init__(
        self,
        model: BaseChatModel,
        *,
        to_kwargs: ParamsToKwargs = stop_only_kwargs,
        name: str | None = None,
    ) -> None:
        super().__init__()
        self.model = model
        self._called = without_client_retries(model)
        self.to_kwargs = to_kwargs
        self._name = name or str(
            getattr(model, "model_name", None) or getattr(model, "model", None) or model._llm_type
        )

    @property
    def name(self) -> str:
        return f"langchain:{self._name}"

    def output_limit(self, params: SamplingParams) -> int:
        """The most output tokens one candidate can have under ``params``: the ``max_tokens`` the call
        passes (``to_kwargs``), else the model's own limit (``max_tokens``, ``max_output_tokens``,
        ``num_predict``...), else ``params.max_tokens``, a guess where the model sets none."""
        _refuse_stages(params)
        sent = self.to_kwargs(params, None).get("max_tokens")
        if isinstance(sent, int) and not isinstance(sent, bool) and sent > 0:
            return sent
        return output_token_limit(self.model) or params.max_tokens

    def _runnable(self, params: SamplingParams) -> Any:
        if not params.tools:
            return self._called
        try:
            return self._called.bind_tools([t.to_openai() for t in params.tools])
        except NotImplementedError as exc:
            raise TerminalBackendError(
                f"{type(self.model).__name__} cannot bind tools", backend=self.name
            ) from exc

    async def _one(
        self, runnable: Any, messages: list[BaseMessage], params: SamplingParams, seed: int | None
    ) -> Candidate:
        started = time.perf_counter()
        kwargs = self.to_kwargs(params, seed)
        grammar, note = _grammar_outcome(params, kwargs)
        try:
            reply = await runnable.ainvoke(messages, **kwargs)
        except Exception as exc:
            raise _classify(exc, self.name) from exc
        latency_ms = (time.perf_counter() - started) * 1000.0
        if not isinstance(reply, AIMessage):
            raise MalformedResponse(
                f"model returned {type(reply).__name__}, not an AIMessage",
                backend=self.name,
                body=repr(reply),
            )
        usage: Mapping[str, Any] = reply.usage_metadata or {}
        metadata = reply.response_metadata or {}
        return Candidate(
            text=_text(reply.content),
            model=self.name,
            tool_calls=tuple(
                ToolCall(name=c["name"], arguments_json=json.dumps(c["args"]), id=c.get("id") or "")
                for c in reply.tool_calls
            ),
            logprobs=_logprobs(metadata),
            finish_reason=metadata.get("finish_reason") or metadata.get("stop_reason"),
            usage=Usage(int(usage.get("input_tokens", 0)), int(usage.get("output_tokens", 0))),
            latency_ms=latency_ms,
            seed=seed,
            grammar=grammar,
            notes=(note,) if note else (),
        )

    async def sample(
        self, messages: MessagesLike, params: SamplingParams | None = None, *, k: int = 1
    ) -> list[Candidate]:
        """k concurrent calls; the first failure is raised once all have ended."""
        check_k(k)
        params = params or SamplingParams()
        _refuse_stages(params)
        # LangChain messages go through untouched (their extra fields intact); dicts are checked first.
        lc_messages: list[BaseMessage] = [m for m in messages if isinstance(m, BaseMessage)]
        if not messages or len(lc_messages) != len(messages):
            lc_messages = convert_to_messages(normalise_messages(messages))
        runnable = self._runnable(params)
        seeds = [None if params.seed is None else params.seed + i for i in range(k)]
        results = await asyncio.gather(
            *(self._one(runnable, lc_messages, params, s) for s in seeds), return_exceptions=True
        )
        for result in results:
            if isinstance(result, BaseException):
                raise result
        return [r for r in results if isinstance(r, Candidate)]
