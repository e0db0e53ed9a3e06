"""The one check of a driver's ``tracer_provider`` argument, made where the driver is built.

Every driver (``RetryController``, ``ControlledToolNode``, ``ControlledStep``, the gateway, ``run_batch``)
runs it on what it was given, so a wrong value is a :class:`~retryctl.exceptions.ConfigError` naming
``tracer_provider`` before any run, not an ``AttributeError`` at the first span of every run (or, without
the extra, a value silently ignored).
"""

from __future__ import annotations

from typing import Any

from retryctl.exceptions import ConfigError
from retryctl.telemetry import _api

__all__ = ["check_tracer_provider"]

FIELD = "tracer_provider"


def check_tracer_provider(value: object) -> Any:
    """``value`` as it is when it can be a tracer provider (``None``: the application's global one), else
    a :class:`~retryctl.exceptions.ConfigError` saying what to pass instead."""
    if value is None:
        return None
    if _api.trace is None:
        problem = "OpenTelemetry is not installed: install retryctl[otel] to trace, or pass None"
        raise ConfigError(field=FIELD, value=value, problem=problem)
    if isinstance(value, type):
        problem = f"pass a tracer provider instance ({value.__name__}()), not the class"
        raise ConfigError(field=FIELD, value=value, problem=problem)
    if isinstance(value, _api.trace.Tracer) or (
        callable(getattr(value, "start_span", None)) and not hasattr(value, "get_tracer")
    ):
        problem = "pass the TracerProvider, not a Tracer (retryctl asks the provider for its own tracer)"
        raise ConfigError(field=FIELD, value=value, problem=problem)
    if not callable(getattr(value, "get_tracer", None)):
        problem = (
            f"must be an OpenTelemetry TracerProvider (with get_tracer), not {type(value).__name__}; "
            "None uses the application's global one"
        )
        raise ConfigError(field=FIELD, value=value, problem=problem)
    return value
