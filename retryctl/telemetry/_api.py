"""Whether OpenTelemetry's API is installed, decided once, at import.

``opentelemetry-api`` is the ``otel`` extra. Without it every tracing call of retryctl returns at its
first line (:data:`trace` is ``None``), so an application that does not trace pays one attribute read per
verdict. retryctl never imports the SDK and never sets a provider or a propagator: it takes the
application's (or the ``tracer_provider`` a driver is given).
"""

from __future__ import annotations

import os
from typing import Any

__all__ = ["GLOBAL_READABLE", "OTEL_AVAILABLE", "UNSET_PROVIDER", "context", "propagate", "trace"]

trace: Any
propagate: Any
context: Any
UNSET_PROVIDER: type | None
try:
    from opentelemetry import context, propagate, trace
    from opentelemetry.trace import ProxyTracerProvider as UNSET_PROVIDER
except ImportError:  # the otel extra is not installed: tracing is off for good in this process
    trace = propagate = context = UNSET_PROVIDER = None

OTEL_AVAILABLE: bool = trace is not None
"""``True`` when ``opentelemetry-api`` could be imported (the ``otel`` extra)."""
# UNSET_PROVIDER: the class of the global provider before the application sets one (the API's proxy).
# While it is the global one, nothing would record a span: retryctl makes none.
GLOBAL_READABLE: bool = (
    trace is not None
    and hasattr(trace, "_TRACER_PROVIDER")
    and "OTEL_PYTHON_TRACER_PROVIDER" not in os.environ
)
"""Whether "no global provider set" can be read from the API's own variable (``trace._TRACER_PROVIDER``
is ``None``) instead of calling ``get_tracer_provider()``, which looks in ``os.environ`` each time (its
own rule: a provider named there is loaded on first use). Decided once; otherwise the API is asked."""
