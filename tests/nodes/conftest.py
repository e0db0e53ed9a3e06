"""Shared fixtures of the nodes tests: every graph test runs once sync and once async."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from retryctl.testing import CapturedRun, acapture_verdicts, capture_verdicts
from tests.nodes._support import Runner


@pytest.fixture(params=["sync", "async"])
def run(request: pytest.FixtureRequest) -> Runner:
    """Run a graph through ``capture_verdicts`` or, for the async case, ``acapture_verdicts``."""
    if request.param == "sync":
        return capture_verdicts

    def run_async(graph: Any, input: Any, config: Any = None) -> CapturedRun:
        return asyncio.run(acapture_verdicts(graph, input, config))

    return run_async
