"""A wrong ``tracer_provider`` is a ``ConfigError`` naming it where each driver is built, not an
``AttributeError`` at the first span of every run (or a 500 of every adaptive request)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from langchain_core.tools import tool
from opentelemetry.sdk.trace import TracerProvider

from retryctl.batch import BatchConfig, ResultsFile, Task, run_batch
from retryctl.exceptions import ConfigError
from retryctl.gateway import EmbeddedUpstream, Gateway
from retryctl.middleware import RetryController
from retryctl.nodes import ControlledStep, ControlledToolCalls, ControlledToolNode
from retryctl.telemetry._provider import check_tracer_provider
from retryctl.testing import ScriptedBackend
from tests.gateway._support import config


@tool
def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b


def _middleware(provider: Any) -> object:
    return RetryController(tracer_provider=provider)


def _tool_node(provider: Any) -> object:
    return ControlledToolNode([add], tracer_provider=provider)


def _step(provider: Any) -> object:
    return ControlledStep([ScriptedBackend(["42"], model="m")], tracer_provider=provider)


def _gateway(provider: Any) -> object:
    upstream = EmbeddedUpstream(ScriptedBackend(["42"]), name="scripted")
    return Gateway(config(), upstream=upstream, tracer_provider=provider)


def _batch(provider: Any, tmp_path: Path) -> object:
    results = ResultsFile(tmp_path / "results.jsonl")
    try:
        graph: Any = object()  # never invoked: the argument is refused first
        tasks = [Task(id="t0", question="q")]
        return asyncio.run(run_batch(graph, tasks, results, config=BatchConfig(), tracer_provider=provider))
    finally:
        results.close()


DRIVERS: dict[str, Callable[[Any, Path], object]] = {
    "RetryController": lambda p, _: _middleware(p),
    "ControlledToolNode": lambda p, _: _tool_node(p),
    "ControlledToolCalls": lambda p, _: ControlledToolCalls([add], tracer_provider=p),
    "ControlledStep": lambda p, _: _step(p),
    "Gateway": lambda p, _: _gateway(p),
    "run_batch": _batch,
}
_TRACER = TracerProvider().get_tracer("app")
WRONG: dict[str, tuple[Any, str]] = {
    "str": ("console", "not str"),
    "tracer": (_TRACER, "pass the TracerProvider, not a Tracer"),
    "true": (True, "not bool"),
    "dict": ({"endpoint": "http://127.0.0.1:4318"}, "not dict"),
    "class": (TracerProvider, "not the class"),
}


@pytest.mark.parametrize("driver", DRIVERS)
@pytest.mark.parametrize("kind", WRONG)
def test_each_driver_refuses_each_wrong_provider(driver: str, kind: str, tmp_path: Path) -> None:
    value, said = WRONG[kind]
    with pytest.raises(ConfigError) as caught:
        DRIVERS[driver](value, tmp_path)
    assert caught.value.field == "tracer_provider"
    assert caught.value.value is value
    assert said in caught.value.problem


@pytest.mark.parametrize("driver", [d for d in DRIVERS if d != "run_batch"])  # test_step_batch.py runs one
def test_each_driver_takes_a_provider_or_none(driver: str, tmp_path: Path) -> None:
    for value in (None, TracerProvider()):
        assert DRIVERS[driver](value, tmp_path) is not None


def test_the_check_returns_what_it_accepts() -> None:
    provider = TracerProvider()
    assert check_tracer_provider(provider) is provider
    assert check_tracer_provider(None) is None
