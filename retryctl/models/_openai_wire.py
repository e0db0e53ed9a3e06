"""The OpenAI chat-completions wire format, read defensively.

Servers that call themselves OpenAI-compatible differ (and break): the body is validated here with our
own lenient models rather than trusted, and every HTTP-client error becomes a classified
:class:`~retryctl.models.BackendError`.
"""

from __future__ import annotations

import email.utils
import json
import time
from collections.abc import Collection, Mapping, Sequence
from typing import Any

import openai
from pydantic import BaseModel, ConfigDict, ValidationError

from retryctl.models._errors import (
    OWN_STATUS,
    BackendError,
    BackendTimeout,
    MalformedResponse,
    ServerFault,
    TerminalBackendError,
    TransientBackendError,
    UnsupportedParameter,
)
from retryctl.models._openai_caps import unsupported_parameter
from retryctl.models._types import Candidate, TokenLogprob, ToolCall, Usage

__all__ = [
    "Logprobs",
    "WireModel",
    "WireUsage",
    "detail_of",
    "first_error",
    "parse_completion",
    "parse_retry_after",
    "split_usage",
    "status_error",
    "token_logprobs",
    "translate_error",
]

_TRANSIENT_STATUS = frozenset({408, 409, 425, 429})


class WireModel(BaseModel):
    """What a server sends, read leniently: unknown fields are ignored."""

    model_config = ConfigDict(extra="ignore")


class _TopLogprob(WireModel):
    token: str
    logprob: float


class _TokenLogprob(WireModel):
    token: str
    logprob: float
    top_logprobs: list[_TopLogprob] | None = None


class Logprobs(WireModel):
    content: list[_TokenLogprob] | None = None


class _Function(WireModel):
    name: str
    arguments: str | dict[str, Any] = "{}"


class _ToolCall(WireModel):
    id: str | None = None
    function: _Function


class _Message(WireModel):
    content: str | None = None
    tool_calls: list[_ToolCall] | None = None


class _Choice(WireModel):
    index: int = 0
    message: _Message
    finish_reason: str | None = None
    logprobs: Logprobs | None = None


class WireUsage(WireModel):
    prompt_tokens: int = 0
    completion_tokens: int = 0


class _Completion(WireModel):
    choices: list[_Choice]
    usage: WireUsage | None = None
    model: str | None = None


def parse_retry_after(headers: Mapping[str, str], *, now: float | None = None) -> float | None:
    """Seconds from ``retry-after-ms`` or ``retry-after`` (seconds or an HTTP date); ``None`` if absent."""
    lowered = {k.lower(): v for k, v in headers.items()}
    if "retry-after-ms" in lowered:
        try:
            return float(lowered["retry-after-ms"]) / 1000.0
        except ValueError:
            pass
    value = lowered.get("retry-after")
    if value is None:
        return None
    try:
        return float(value)
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - (time.time() if now is None else now))


def translate_error(exc: Exception, *, backend: str, sent: Collection[str] = ()) -> BackendError:
    """Map an ``openai`` client error to the backend error class that says what retrying can do.

    ``sent`` names what the request asked for (see :func:`~retryctl.models._openai_modes.sent_names`):
    a status error whose body refuses one of them is :class:`UnsupportedParameter`, whatever its status.
    """
    if isinstance(exc, BackendError):
        return exc
    if isinstance(exc, openai.APITimeoutError):
        return BackendTimeout("request timed out", backend=backend)
    if isinstance(exc, openai.APIConnectionError):
        cause = exc.__cause__ or exc.__context__
        detail = f": {type(cause).__name__}: {cause}" if cause else ""
        return TransientBackendError(f"connection failed{detail}", backend=backend)
    if isinstance(exc, openai.APIStatusError):
        status = exc.status_code
        retry_after = parse_retry_after(exc.response.headers)
        # One line: a server's message may be a multi-line pydantic report (llama.cpp's server).
        message = f"HTTP {status}: {' '.join(str(exc.message).split())[:200]}"
        refused = unsupported_parameter(status, _body_text(exc), sent)
        if refused is not None:
            return UnsupportedParameter(
                f"the server does not support {refused!r}: {message}",
                backend=backend,
                parameter=refused,
                status_code=status,
            )
        whole = detail_of(_body_text(exc)) if status == OWN_STATUS else None
        return status_error(status, message, backend=backend, retry_after_s=retry_after, detail=whole)
    if isinstance(exc, openai.APIResponseValidationError | json.JSONDecodeError):
        return MalformedResponse(f"unreadable response: {exc}", backend=backend)
    return TerminalBackendError(f"{type(exc).__name__}: {exc}", backend=backend)


def status_error(
    status: int,
    message: str,
    *,
    backend: str,
    retry_after_s: float | None = None,
    detail: str | None = None,
) -> TransientBackendError | TerminalBackendError:
    """The error of an HTTP ``status`` from a model server: transient (worth a retry) for 408, 409, 425,
    429 and every 5xx, terminal for any other status. A 500 is a :class:`ServerFault` carrying
    ``detail`` (the server's whole message, :func:`detail_of`; ``message`` when not given), so that a
    retry meeting it again word for word is known as the request's own."""
    if status == OWN_STATUS:
        detail = message if detail is None else detail
        return ServerFault(message, backend=backend, detail=detail, retry_after_s=retry_after_s)
    if status in _TRANSIENT_STATUS or status >= 500:
        return TransientBackendError(
            message, backend=backend, status_code=status, retry_after_s=retry_after_s
        )
    return TerminalBackendError(message, backend=backend, status_code=status, retry_after_s=retry_after_s)


def detail_of(raw: bytes | str) -> str:
    """A server's whole error message (its ``error.message`` in OpenAI's shape, else the body), spaces
    folded."""
    try:
        found = json.loads(raw)
        text = str(found["error"]["message"]) if isinstance(found, dict) else _text(raw)
    except (ValueError, KeyError, TypeError):  # not JSON, not UTF-8, not OpenAI's shape
        text = _text(raw)
    return " ".join(text.split())


def _text(raw: bytes | str) -> str:
    return raw.decode("utf-8", "replace") if isinstance(raw, bytes) else raw


def _body_text(exc: openai.APIStatusError) -> str:
    try:
        return exc.response.text
    except Exception:  # a body never read (a stream): the SDK's parse of it is what is left
        return json.dumps(exc.body) if exc.body is not None else str(exc.message)


def split_usage(total: Usage, weights: Sequence[int]) -> list[Usage]:
    """Share a call's usage among its candidates: input to the first, output by ``weights``.

    The parts always add up to ``total``, so summing candidates never double-counts a prompt.
    """
    count = len(weights)
    if count == 0:
        return []
    weight_sum = sum(weights)
    shares = [
        (total.output_tokens * w) // weight_sum if weight_sum else total.output_tokens // count
        for w in weights
    ]
    shares[-1] += total.output_tokens - sum(shares)
    return [
        Usage(input_tokens=total.input_tokens if i == 0 else 0, output_tokens=shares[i]) for i in range(count)
    ]


def first_error(exc: ValidationError, whole: str) -> str:
    """``where: what`` of a validation error's first problem (``whole`` when it is the whole value)."""
    first = exc.errors()[0]
    where = ".".join(str(p) for p in first["loc"]) or whole
    return f"{where}: {first['msg']}"


def token_logprobs(logprobs: Logprobs | None) -> tuple[TokenLogprob, ...] | None:
    """A choice's (or a stream chunk's) logprobs as candidates carry them; ``None`` when absent."""
    if logprobs is None or logprobs.content is None:
        return None
    return tuple(
        TokenLogprob(
            token=t.token,
            logprob=t.logprob,
            top=tuple((a.token, a.logprob) for a in (t.top_logprobs or ())),
        )
        for t in logprobs.content
    )


def _tool_calls(choice: _Choice) -> tuple[ToolCall, ...]:
    return tuple(
        ToolCall(
            name=call.function.name,
            arguments_json=(
                call.function.arguments
                if isinstance(call.function.arguments, str)
                else json.dumps(call.function.arguments)
            ),
            id=call.id or "",
        )
        for call in choice.message.tool_calls or ()
    )


def parse_completion(
    body: str,
    *,
    backend: str,
    model: str,
    latency_ms: float,
    seed: int | None,
    status_code: int | None = None,
) -> list[Candidate]:
    """Candidates from a chat-completion body; :class:`MalformedResponse` for anything unusable."""
    try:
        data = json.loads(body)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise MalformedResponse(
            f"body is not JSON ({exc.msg if isinstance(exc, json.JSONDecodeError) else exc})",
            backend=backend,
            body=body,
            status_code=status_code,
        ) from exc
    try:
        completion = _Completion.model_validate(data)
    except ValidationError as exc:
        raise MalformedResponse(
            f"not a chat completion: {first_error(exc, 'body')}",
            backend=backend,
            body=body,
            status_code=status_code,
        ) from exc
    if not completion.choices:
        raise MalformedResponse(
            "response has no choices", backend=backend, body=body, status_code=status_code
        )
    choices = sorted(completion.choices, key=lambda c: c.index)
    logprobs = [token_logprobs(c.logprobs) for c in choices]
    wire_usage = completion.usage
    total = Usage(wire_usage.prompt_tokens, wire_usage.completion_tokens) if wire_usage else Usage()
    usages = split_usage(total, [len(lp) if lp else 1 for lp in logprobs])
    notes = () if wire_usage else ("the server reported no usage",)
    return [
        Candidate(
            text=choice.message.content or "",
            model=model,
            tool_calls=_tool_calls(choice),
            logprobs=lp,
            finish_reason=choice.finish_reason,
            usage=usage,
            latency_ms=latency_ms,
            seed=seed,
            notes=notes,
        )
        for choice, lp, usage in zip(choices, logprobs, usages, strict=True)
    ]
