"""A real trace backend for the telemetry tests: one ``phoenix serve`` per session on 127.0.0.1."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests._phoenix import Phoenix, phoenix_command


@pytest.fixture(scope="session")
def phoenix(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Phoenix]:
    """A running Phoenix (its database in a temporary directory), stopped after the session."""
    command = phoenix_command()
    if command is None:
        pytest.skip("arize-phoenix is not installed (pip install -e '.[dev]')")
    server = Phoenix(tmp_path_factory.mktemp("phoenix"), command)
    server.start()
    try:
        yield server
    finally:
        server.stop()
