"""Fixtures of the controller tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.models._fault_server import FaultServer


@pytest.fixture
def fault_server() -> Iterator[FaultServer]:
    """A real HTTP server on 127.0.0.1 answering scripted faults (see ``tests/controller/_clients.py``)."""
    server = FaultServer().start()
    yield server
    server.stop()
