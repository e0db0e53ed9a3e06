"""Error classes: what a failure means for the next move (retry, refine, or give up on this target).

``classify(exc)`` maps an exception to one of four classes:

- **transient**: the same call may work later (timeouts, connection errors, network ``OSError`` errnos,
  HTTP 408/409/425/429/5xx, gRPC UNAVAILABLE, AWS throttling); carries the server's ``Retry-After``
  when it sent one.
- **validation**: the call or its output was malformed (pydantic and JSON errors, bad arguments, HTTP
  400/413/422, gRPC INVALID_ARGUMENT, an output cut at the token limit); retrying with feedback can fix it.
- **semantic**: well-formed but judged wrong (:class:`~retryctl.exceptions.SemanticError`).
- **terminal**: will not change (auth 401/403, 404, other 4xx, an exhausted quota, a parameter the API
  says it does not support, a TLS certificate, an open breaker, a spent budget, cancellation, retryctl
  misuse).

Recognised, by the names of an exception's classes and by its attributes, never by importing the library:
the standard library's sockets, TLS, ``http.client``, ``urllib`` and ``asyncio``; ``requests``,
``urllib3``, ``httpx``/``httpx2`` and ``aiohttp`` (:mod:`._error_net`); ``grpc``, ``botocore``, ``openai``
and ``anthropic`` (:mod:`._error_sdk`). A program that never loaded a library raises none of its errors,
and the controller stays importable without any of them. Any other exception carrying an HTTP status
(``status_code``, ``status`` or a ``response`` with one) is judged by it (:mod:`._error_http`).

An exception's own retryability mark is honoured: ``is_retryable`` (langchain-core's ``ModelError`` and
its provider subclasses have it) ``False`` makes a transient error terminal; ``True`` makes transient
an error nothing else recognised, but does not overrule what a response said (the mark is often the
class's, as on ``ModelRateLimitError``, while OpenAI's 429 ``insufficient_quota`` is terminal).

**An exception nobody recognises is terminal** (``default=`` changes it), after looking at its explicit
cause (``raise ToolError(...) from err`` is judged by ``err``). Once the network's and the SDKs' faults
are recognised, what is left is mostly a program's own bug (``KeyError``, ``AttributeError``,
``RuntimeError``, an assertion) or a domain error, which a retry repeats: retrying it burns budget and
time on a fault that does not clear, while a wrongly terminal error only costs a switch to the next member
of the group, or a stop that says why. Who knows better says so: a driver's ``retry_on=`` or
``classify=`` (:func:`~retryctl.controller.error_classifier`).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable

import pydantic

from retryctl.controller._error_class import Classification, ErrorClass, make
from retryctl.controller._error_http import from_status, parse_retry_after, read_attr
from retryctl.controller._error_net import NET_RULES, Rule, by_errno
from retryctl.controller._error_sdk import SDK_RULES
from retryctl.exceptions import BreakerOpen, BudgetExceeded, RetryctlError, RuntimeFailure, SemanticError

__all__ = ["Classification", "ErrorClass", "classify", "parse_retry_after", "rule_for"]

_SEVERITY = (ErrorClass.TRANSIENT, ErrorClass.SEMANTIC, ErrorClass.VALIDATION, ErrorClass.TERMINAL)

_LIBRARY_RULES: dict[str, Rule] = {**NET_RULES, **SDK_RULES}
_BUILTIN_RULES: dict[str, Rule] = {
    # asyncio's and socket's timeouts too; an errno (ETIMEDOUT, ECONNRESET...) is named in the reason
    "builtins.TimeoutError": lambda exc, now, judge: _network(exc, "timed out"),
    "builtins.ConnectionError": lambda exc, now, judge: _network(exc, "the connection failed"),
    "builtins.OSError": by_errno,
    "json.JSONDecodeError": lambda exc, now, judge: _json(exc),
    "pydantic_core.ValidationError": lambda exc, now, judge: _pydantic(exc),
    "builtins.TypeError": lambda exc, now, judge: make(exc, ErrorClass.VALIDATION, f"bad argument: {exc}"),
    "builtins.ValueError": lambda exc, now, judge: make(exc, ErrorClass.VALIDATION, f"bad argument: {exc}"),
}
"""Looked at after the libraries and after an HTTP status: a library's error that is also an ``OSError``
or a ``ValueError`` is the library's first."""

_RULES_BY_TYPE: dict[type, tuple[Rule | None, Rule | None]] = {}
_MAX_TYPES = 4096


def rule_for(kind: type) -> tuple[Rule | None, Rule | None]:
    """The library rule and the built-in rule of exception type ``kind``: for each table, the entry of
    the first class in its MRO that has one (cached per type: the MRO is walked once)."""
    found = _RULES_BY_TYPE.get(kind)
    if found is not None:
        return found
    library = builtin = None
    for cls in kind.__mro__:
        key = f"{cls.__module__.partition('.')[0]}.{cls.__name__}"
        if library is None:
            library = _LIBRARY_RULES.get(key)
        if builtin is None:
            builtin = _BUILTIN_RULES.get(key)
    if len(_RULES_BY_TYPE) >= _MAX_TYPES:  # classes made on the fly must not grow it without end
        _RULES_BY_TYPE.clear()
    found = _RULES_BY_TYPE[kind] = (library, builtin)
    return found


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
        return make(
            exc,
            inner.error_class,
            f"caused by {inner.exception_type}: {inner.reason}",
            retry_after_s=inner.retry_after_s,
            status_code=inner.status_code,
        )
    return make(exc, default, f"unrecognised exception type, treated as {default.value}")


def _classify(exc: BaseException, now: Callable[[], float]) -> Classification | None:
    if isinstance(exc, BaseExceptionGroup):
        return _group(exc, now)
    if isinstance(exc, SemanticError):
        return make(exc, ErrorClass.SEMANTIC, str(exc))
    if isinstance(exc, BreakerOpen | BudgetExceeded):
        return make(exc, ErrorClass.TERMINAL, str(exc))
    if isinstance(exc, RetryctlError):
        if exc.error_class is None:
            if isinstance(exc, RuntimeFailure) and exc.__cause__ is not None:
                return None  # something outside broke, and declared nothing: judged by that cause
            return make(exc, ErrorClass.TERMINAL, f"retryctl error: {exc}")
        # The error declared its own class (e.g. a backend's 429): keep it, with its HTTP facts.
        code = getattr(exc, "status_code", None)
        return make(
            exc,
            ErrorClass(exc.error_class),
            str(exc),
            retry_after_s=getattr(exc, "retry_after_s", None),
            status_code=code if isinstance(code, int) else None,
        )
    if not isinstance(exc, Exception):  # CancelledError, KeyboardInterrupt, SystemExit
        return make(exc, ErrorClass.TERMINAL, "cancelled or interrupted; never retried")
    library, builtin = rule_for(type(exc))
    found = _apply(library, exc, now) if library is not None else None
    if found is None:
        found = from_status(exc, now)
    if found is None and builtin is not None:
        found = _apply(builtin, exc, now)
    mark = read_attr(exc, "is_retryable")
    return found if not isinstance(mark, bool) else _marked(exc, found, mark)


def _apply(rule: Rule, exc: BaseException, now: Callable[[], float]) -> Classification | None:
    if isinstance(rule, tuple):
        return make(exc, rule[0], rule[1])
    return rule(exc, now, lambda inner: classify(inner, now=now))


def _marked(exc: BaseException, found: Classification | None, retryable: bool) -> Classification:
    """``found`` with the exception's own ``is_retryable`` mark applied (see the module docstring)."""
    if found is None:
        return make(exc, ErrorClass.TRANSIENT if retryable else ErrorClass.TERMINAL, _MARK[retryable])
    if retryable or not found.retryable:
        # A mark of True is often class-wide (langchain-core's ModelRateLimitError): it does not
        # overrule what the response itself said (OpenAI's 429 "insufficient_quota").
        return found
    return make(exc, ErrorClass.TERMINAL, f"{found.reason}; {_MARK[False]}", status_code=found.status_code)


_MARK = {True: "marked retryable (is_retryable)", False: "marked not retryable (is_retryable)"}


def _network(exc: BaseException, reason: str) -> Classification:
    found = by_errno(exc, time.time, classify)
    return found if found is not None and found.retryable else make(exc, ErrorClass.TRANSIENT, reason)


def _json(exc: BaseException) -> Classification:
    assert isinstance(exc, json.JSONDecodeError)
    return make(exc, ErrorClass.VALIDATION, f"invalid JSON: {exc.msg} at char {exc.pos}")


def _pydantic(exc: BaseException) -> Classification | None:
    if not isinstance(exc, pydantic.ValidationError):
        return None
    first = exc.errors()[0] if exc.error_count() else None
    where = ".".join(str(p) for p in first["loc"]) if first else ""
    detail = f": {where or 'value'}: {first['msg']}" if first else ""
    return make(exc, ErrorClass.VALIDATION, f"{exc.error_count()} schema error(s) for {exc.title}{detail}")


def _group(group: BaseExceptionGroup[BaseException], now: Callable[[], float]) -> Classification:
    """A group is as bad as its worst member: one terminal failure makes the whole group terminal."""
    parts = [classify(e, now=now) for e in group.exceptions]
    worst = max(parts, key=lambda c: _SEVERITY.index(c.error_class))
    waits = [c.retry_after_s for c in parts if c.retry_after_s is not None]
    return make(
        group,
        worst.error_class,
        f"{len(parts)} errors, worst {worst.exception_type}: {worst.reason}",
        retry_after_s=max(waits) if waits else None,
        status_code=worst.status_code,
    )
