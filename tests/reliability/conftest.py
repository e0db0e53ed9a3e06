"""Fixtures of the reliability suites."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from retryctl.audit import DecisionLog
from tests.reliability._faulty_tools import FaultyTools


@pytest.fixture(params=["sync", "async"])
def mode(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def log(tmp_path: Path) -> Iterator[DecisionLog]:
    with DecisionLog(tmp_path / "log.jsonl") as opened:
        yield opened


@pytest.fixture
def tools() -> Iterator[FaultyTools]:
    made = FaultyTools()
    yield made
    made.release.set()  # frees the threads that timed-out sync calls left waiting
