"""Error classes: what a failure means for the next move (retry, refine, or give up on this target).

``classify(exc)`` maps an exception to one of four classes:

- **transient**: the same call may work later (timeouts, connection errors, HTTP 408/409/425/429/5xx);
  carries the server's ``Retry-After`` when it sent one.
- **validation**: the call or its output was malformed (pydantic and JSON errors, bad arguments, HTTP
  400/413/422, an output cut at the token limit); retrying with feedback can fix it.
- **semantic**: well-formed but judged wrong (:class:`~retryctl.exceptions.SemanticError`).
- **terminal**: will not change (auth 401/403, 404, other 4xx, an exhausted quota, a parameter the API
  says it does not support, an open breaker, a spent budget, cancellation, retryctl misuse).

An exception of a type it does not know is **terminal** by default (``default=`` changes it), after
looking at its explicit cause (``raise Wrapper(...) from err``): retrying what we do not understand
burns budget on faults that may never clear, and a wrongly terminal error only costs a switch or a stop.

httpx, httpx2 (the client openai uses) and openai are never imported here: their classes are looked up
in ``sys.modules``. If a program never loaded a library, none of its exceptions can exist, so nothing is
missed, and the controller stays importable without them. Status codes and headers are read duck-typed.
"""

from __future__ import annotations

import itertools
import json
import math
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from email.utils import parsedate_to_datetime
from enum import StrEnum

import pydantic

from retryctl.exceptions import BreakerOpen, BudgetExceeded, RetryctlError, SemanticError

__all__ = ["Classification", "ErrorClass", "classify", "parse_retry_after"]

_HTTPX_MODULES = ("httpx", "httpx2")
_TRANSIENT_STATUS = frozenset({408, 409, 425, 429})
_VALIDATION_STATUS = frozenset({400, 413, 422})
_PERMANENT_5XX = frozenset({501, 505})
_UNSUPPORTED_CODES = frozenset({"unsupported_parameter", "unsupported_value"})
"""The OpenAI API's ``code`` for a parameter (or value) the model does not take."""
_MAX_REASON = 1000
"""Longest reason kept. An exception's message becomes a verdict's reason, the feedback a model reads and
a decision-log line: a tool raising with megabytes of text must not copy them into all three."""


class ErrorClass(StrEnum):
    """What a failure means for the next move."""

    TRANSIENT = "transient"
    """The same call may succeed later: retry after a backoff."""
    VALIDATION = "validation"
    """Malformed input or output: refine with feedback naming the problem."""
    SEMANTIC = "semantic"
    """Well-formed but judged wrong (low confidence, a failed check): refine or switch."""
    TERMINAL = "terminal"
    """Will not change by retrying: switch to an alternative or stop."""


_SEVERITY = (ErrorClass.TRANSIENT, ErrorClass.SEMANTIC, ErrorClass.VALIDATION, ErrorClass.TERMINAL)


@dataclass(frozen=True, slots=True)
class Classification:
    """The class of one failure, and why."""

    error_class: ErrorClass
    """transient, validation, semantic or terminal."""
    reason: str
    """One sentence naming the exception and what decided its class."""
    retry_after_s: float | None = None
    """Seconds the server asked to wait (``Retry-After``), when it said."""
    status_code: int | None = None
    """The HTTP status, for HTTP errors."""
    exception_type: str = ""
    """The exception's qualified type name, e.g. ``httpx.ConnectTimeout``."""

    @property
    def retryable(self) -> bool:
        """Whether the same call may work again."""
        return self.error_class is ErrorClass.TRANSIENT


def classify(
    exc: BaseException,
    *,
    default: ErrorClass = ErrorClass.TERMINAL,
    now: Callable[[], float] = time.time,
) -> Classification:
    """The :class:`Classification` of ``exc``; ``now`` (Unix seconds) dates a ``Retry-After`` date."""
    found = _classify(exc, now)
    if found is not None:
        return found
    cause = exc.__cause__
    if cause is not None and cause is not exc:
        inner = classify(cause, default=default, now=now)
        return _make(
            exc,
            inner.error_class,
            f"caused by {inner.exception_type}: {inner.reason}",
            retry_after_s=inner.retry_after_s,
            status_code=inner.status_code,
        )
    return _make(exc, default, f"unrecognised exception type, treated as {default.value}")


def _classify(exc: BaseException, now: Callable[[], float]) -> Classification | None:
    if isinstance(exc, BaseExceptionGroup):
        return _group(exc, now)
    if isinstance(exc, SemanticError):
        return _make(exc, ErrorClass.SEMANTIC, str(exc))
    if isinstance(exc, BreakerOpen | BudgetExceeded):
        return _make(exc, ErrorClass.TERMINAL, str(exc))
    if isinstance(exc, RetryctlError):
        if exc.error_class is None:
            return _make(exc, ErrorClass.TERMINAL, f"retryctl error: {exc}")
        # The error declared its own class (e.g. a backend's 429): keep it, with its HTTP facts.
        code = getattr(exc, "status_code", None)
        return _make(
            exc,
            ErrorClass(exc.error_class),
            str(exc),
            retry_after_s=getattr(exc, "retry_after_s", None),
            status_code=code if isinstance(code, int) else None,
        )
    if not isinstance(exc, Exception):  # CancelledError, KeyboardInterrupt, SystemExit
        return _make(exc, ErrorClass.TERMINAL, "cancelled or interrupted; never retried")
    return _library(exc, now) or _status(exc, now) or _builtin(exc)


def _library(exc: Exception, now: Callable[[], float]) -> Classification | None:
    openai = sys.modules.get("openai")
    if openai is not None:
        if isinstance(exc, openai.APIStatusError):
            return _status(exc, now)
        if isinstance(exc, openai.APITimeoutError):
            return _make(exc, ErrorClass.TRANSIENT, "the request timed out")
        if isinstance(exc, openai.APIConnectionError):
            return _make(exc, ErrorClass.TRANSIENT, "could not connect to the API")
        if isinstance(exc, openai.LengthFinishReasonError):
            return _make(exc, ErrorClass.VALIDATION, "the output hit the token limit unfinished")
        if isinstance(exc, openai.ContentFilterFinishReasonError):
            return _make(exc, ErrorClass.TERMINAL, "the content filter rejected the output")
        if isinstance(exc, openai.APIResponseValidationError):
            return _make(exc, ErrorClass.TERMINAL, "the API response did not match its schema")
    for name in _HTTPX_MODULES:
        httpx = sys.modules.get(name)
        if httpx is None:
            continue
        if isinstance(exc, httpx.HTTPStatusError):
            return _status(exc, now)
        if isinstance(exc, httpx.TimeoutException):
            return _make(exc, ErrorClass.TRANSIENT, "the request timed out")
        if isinstance(exc, httpx.UnsupportedProtocol | httpx.LocalProtocolError):
            return _make(exc, ErrorClass.TERMINAL, "the request itself is malformed")
        if isinstance(exc, httpx.TransportError):
            return _make(exc, ErrorClass.TRANSIENT, "the connection failed")
    return None


def _builtin(exc: Exception) -> Classification | None:
    if isinstance(exc, TimeoutError):  # asyncio.TimeoutError is this class since 3.11
        return _make(exc, ErrorClass.TRANSIENT, "timed out")
    if isinstance(exc, ConnectionError):
        return _make(exc, ErrorClass.TRANSIENT, "the connection failed")
    if isinstance(exc, pydantic.ValidationError):
        first = exc.errors()[0] if exc.error_count() else None
        where = ".".join(str(p) for p in first["loc"]) if first else ""
        detail = f": {where or 'value'}: {first['msg']}" if first else ""
        return _make(
            exc, ErrorClass.VALIDATION, f"{exc.error_count()} schema error(s) for {exc.title}{detail}"
        )
    if isinstance(exc, json.JSONDecodeError):
        return _make(exc, ErrorClass.VALIDATION, f"invalid JSON: {exc.msg} at char {exc.pos}")
    if isinstance(exc, TypeError | ValueError):
        return _make(exc, ErrorClass.VALIDATION, f"bad argument: {exc}")
    return None


def _status(exc: Exception, now: Callable[[], float]) -> Classification | None:
    """Classify by the HTTP status the exception carries (``status_code`` or ``response``)."""
    response = getattr(exc, "response", None)
    code = getattr(exc, "status_code", None)
    if not isinstance(code, int):
        code = getattr(response, "status_code", None)
    if not isinstance(code, int) or isinstance(code, bool) or not 100 <= code <= 599:
        return None
    headers = getattr(response, "headers", None)
    wait = parse_retry_after(headers, now=now()) if headers is not None else None
    error_class, why = _status_class(code, getattr(exc, "code", None))
    should_retry = _header(headers, "x-should-retry") if headers is not None else None
    if should_retry == "true" and error_class is not ErrorClass.TRANSIENT:
        error_class, why = ErrorClass.TRANSIENT, f"{why}, but the server asked for a retry"
    elif should_retry == "false" and error_class is ErrorClass.TRANSIENT:
        error_class, why = ErrorClass.TERMINAL, f"{why}, but the server said not to retry"
    return _make(exc, error_class, f"HTTP {code}: {why}", retry_after_s=wait, status_code=code)


def _status_class(code: int, api_code: object) -> tuple[ErrorClass, str]:
    if code == 429 and api_code == "insufficient_quota":
        return ErrorClass.TERMINAL, "the account's quota is spent"
    if api_code in _UNSUPPORTED_CODES:
        # A capability error: neither a retry nor feedback to the model changes what the server takes.
        # (retryctl's own OpenAI backend reads any body for these and steps around them itself.)
        return ErrorClass.TERMINAL, "the server does not support a parameter of the request"
    if code == 429:
        return ErrorClass.TRANSIENT, "rate limited"
    if code in _TRANSIENT_STATUS:
        return ErrorClass.TRANSIENT, "the server may accept it later"
    if code in _VALIDATION_STATUS:
        return ErrorClass.VALIDATION, "the request was rejected as invalid"
    if code in (401, 403):
        return ErrorClass.TERMINAL, "not authenticated or not permitted"
    if code == 404:
        return ErrorClass.TERMINAL, "not found"
    if code >= 500 and code not in _PERMANENT_5XX:
        return ErrorClass.TRANSIENT, "server error"
    return ErrorClass.TERMINAL, "the server will give the same answer again"


def _header(headers: object, name: str) -> str | None:
    get = getattr(headers, "get", None)
    if get is None:
        return None
    value = get(name)
    if value is None and isinstance(headers, dict):  # a plain dict is case-sensitive
        value = next((v for k, v in headers.items() if str(k).lower() == name), None)
    return None if value is None else str(value).strip().lower()


def parse_retry_after(headers: object, *, now: float | None = None) -> float | None:
    """Seconds to wait from ``retry-after-ms`` or ``Retry-After`` (seconds or an HTTP date), or None.

    ``now`` (Unix seconds, default ``time.time()``) is what an HTTP date is measured from; a date in
    the past means 0. Malformed or negative values are ignored.
    """
    millis = _number(_header(headers, "retry-after-ms"))
    if millis is not None:
        return millis / 1000
    raw = _header(headers, "retry-after")
    if raw is None:
        return None
    seconds = _number(raw)
    if seconds is not None:
        return seconds
    try:
        when = parsedate_to_datetime(raw)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:  # RFC 9110 dates are GMT
        return None
    return max(0.0, when.timestamp() - (time.time() if now is None else now))


def _number(raw: str | None) -> float | None:
    if raw is None:
        return None
    try:
        value = float(raw)
    except ValueError:
        return None
    return value if math.isfinite(value) and value >= 0 else None


def _group(group: BaseExceptionGroup[BaseException], now: Callable[[], float]) -> Classification:
    """A group is as bad as its worst member: one terminal failure makes the whole group terminal."""
    parts = [classify(e, now=now) for e in group.exceptions]
    worst = max(parts, key=lambda c: _SEVERITY.index(c.error_class))
    waits = [c.retry_after_s for c in parts if c.retry_after_s is not None]
    return _make(
        group,
        worst.error_class,
        f"{len(parts)} errors, worst {worst.exception_type}: {worst.reason}",
        retry_after_s=max(waits) if waits else None,
        status_code=worst.status_code,
    )


def _make(
    exc: BaseException,
    error_class: ErrorClass,
    reason: str,
    *,
    retry_after_s: float | None = None,
    status_code: int | None = None,
) -> Classification:
    kind = type(exc)
    # Public path only: "openai._exceptions" -> "openai", "retryctl.exceptions" stays.
    parts = list(itertools.takewhile(lambda p: not p.startswith("_"), kind.__module__.split(".")))
    module = ".".join(parts)
    name = kind.__qualname__ if module in ("", "builtins") else f"{module}.{kind.__qualname__}"
    return Classification(
        error_class=error_class,
        reason=_clip(reason),
        retry_after_s=retry_after_s,
        status_code=status_code,
        exception_type=name,
    )


def _clip(reason: str) -> str:
    if len(reason) <= _MAX_REASON:
        return reason
    return f"{reason[:_MAX_REASON]}... [{len(reason) - _MAX_REASON} more characters]"
