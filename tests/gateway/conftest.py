"""Fixtures of the gateway tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.gateway._breaker_client import Client
from tests.gateway._content_server import ContentServer
from tests.gateway._support import close_gateways


@pytest.fixture(autouse=True)
def _closed_gateways() -> Iterator[None]:
    """Every gateway a test drove in this process is closed after it, on its own event loop."""
    yield
    close_gateways()


@pytest.fixture
def server() -> Iterator[ContentServer]:
    found = ContentServer().start()
    yield found
    found.stop()


@pytest.fixture
def clients(server: ContentServer) -> Iterator[list[Client]]:
    made: list[Client] = []
    yield made
    for client in made:
        client.close()
