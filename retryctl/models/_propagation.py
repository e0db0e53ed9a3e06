"""The trace context an outgoing model request carries (W3C ``traceparent``), when there is one.

An upstream that traces (vLLM, a gateway of its own, an instrumented server) then puts its spans in
the caller's trace, under the attempt that called it. Nothing is imported for it: when the
application never imported OpenTelemetry, no span can be current and there is nothing to pass on, so
a request that is not traced pays one dictionary lookup.
"""

from __future__ import annotations

import importlib
import sys

__all__ = ["trace_headers"]


def trace_headers() -> dict[str, str] | None:
    """The headers the application's global propagator writes for the current context (``traceparent``,
    ``tracestate``, baggage), or ``None`` when OpenTelemetry is not in use or no span is current."""
    trace = sys.modules.get("opentelemetry.trace")
    if trace is None or not trace.get_current_span().get_span_context().is_valid:
        return None
    propagate = sys.modules.get("opentelemetry.propagate") or importlib.import_module(
        "opentelemetry.propagate"
    )
    headers: dict[str, str] = {}
    propagate.inject(headers)
    return headers or None
