"""The vocabulary of error classes: :class:`ErrorClass`, :class:`Classification`, and :func:`make`,
the one constructor every rule of :mod:`._errors` and its tables builds a classification with."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum

__all__ = ["Classification", "ErrorClass", "Judge", "make", "type_name"]

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


Judge = Callable[[BaseException], Classification]
"""The whole classification of another exception (one a rule finds wrapped inside the one it reads)."""


def type_name(kind: type) -> str:
    """The public, qualified name of an exception type: ``openai._exceptions`` -> ``openai``,
    ``builtins`` dropped (``TimeoutError``)."""
    name = _NAMES.get(kind)
    if name is None:
        parts = itertools.takewhile(lambda p: not p.startswith("_"), kind.__module__.split("."))
        module = ".".join(parts)
        name = kind.__qualname__ if module in ("", "builtins") else f"{module}.{kind.__qualname__}"
        if len(_NAMES) >= 4096:  # classes made on the fly must not grow it without end
            _NAMES.clear()
        _NAMES[kind] = name
    return name


_NAMES: dict[type, str] = {}


def make(
    exc: BaseException,
    error_class: ErrorClass,
    reason: str,
    *,
    retry_after_s: float | None = None,
    status_code: int | None = None,
) -> Classification:
    """The classification of ``exc`` (its reason clipped to a sane length)."""
    if len(reason) > _MAX_REASON:
        reason = f"{reason[:_MAX_REASON]}... [{len(reason) - _MAX_REASON} more characters]"
    return Classification(
        error_class=error_class,
        reason=reason,
        retry_after_s=retry_after_s,
        status_code=status_code,
        exception_type=type_name(type(exc)),
    )
