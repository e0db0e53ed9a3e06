"""An incoming request's trace made current for a block (the gateway's proxied requests).

A proxied request makes no span of retryctl's (nothing is decided about it); its upstream request
still carries the caller's trace, so that the upstream's spans join it. When a server instrumentation
already made a span current, that span is the parent instead (:func:`incoming_context` says so).
"""

from __future__ import annotations

from collections.abc import Mapping
from contextlib import AbstractContextManager, nullcontext
from types import TracebackType
from typing import Any

from retryctl.telemetry import _api
from retryctl.telemetry._tracing import incoming_context

__all__ = ["continued"]

_NOTHING: AbstractContextManager[None] = nullcontext()


class _Attached:
    __slots__ = ("_context", "_token")

    def __init__(self, context: Any) -> None:
        self._context = context

    def __enter__(self) -> None:
        self._token = _api.context.attach(self._context)

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        _api.context.detach(self._token)


def continued(headers: Mapping[str, str]) -> AbstractContextManager[None]:
    """The trace of ``headers``' ``traceparent`` as the current context for the block; nothing to do
    (a shared no-op) without the extra, without a ``traceparent``, or under a current span."""
    if _api.trace is None or "traceparent" not in headers:
        return _NOTHING
    context = incoming_context(headers)
    return _NOTHING if context is None else _Attached(context)
