"""OpenTelemetry spans of every wrapped step and tool call (the ``otel`` extra: ``opentelemetry-api``).

Each wrapped step is a span ``retryctl.step <name>`` and each tool call ``retryctl.tool <name>``; each
attempt a child span named for its target (the model or tool); each verdict a ``gen_ai.evaluation.result``
event on its attempt, with ``retryctl.*`` attributes for the rest (docs/observability.md). The spans go
through the application's tracer provider (the global one, or the ``tracer_provider`` a driver is given):
retryctl configures nothing. Without the extra, or with no provider set, nothing is made.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from retryctl._lazy import lazy_exports

if TYPE_CHECKING:
    from retryctl.telemetry._api import OTEL_AVAILABLE
    from retryctl.telemetry._tracing import NO_TRACING, Tracing, incoming_context

__all__ = ["NO_TRACING", "OTEL_AVAILABLE", "Tracing", "incoming_context", "names"]

_MODULES = {
    "NO_TRACING": "_tracing",
    "OTEL_AVAILABLE": "_api",
    "Tracing": "_tracing",
    "incoming_context": "_tracing",
}

__getattr__, __dir__ = lazy_exports(globals(), _MODULES, subpackages=("names",))
