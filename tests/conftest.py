"""Fixtures shared by the whole suite."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.models._fault_server import FaultServer

SHARED_BANK = Path(__file__).resolve().parents[2] / "shared" / "banks" / "last_letters_gpt35.jsonl"
"""The real sample bank, which lives beside the clone (``../shared``), never inside the project."""


@pytest.fixture(scope="session")
def shared_bank_path() -> Path:
    """The shared bank's path. A developer without ``../shared`` skips; CI, which has it, must not."""
    if not SHARED_BANK.exists():
        if os.environ.get("CI"):
            pytest.fail(f"CI runs beside shared/, but the bank is missing: {SHARED_BANK}")
        pytest.skip(f"shared bank not found at {SHARED_BANK}")
    return SHARED_BANK


@pytest.fixture
def fault_server() -> Iterator[FaultServer]:
    """A misbehaving OpenAI-compatible server on 127.0.0.1 (tests/models/_fault_server.py)."""
    server = FaultServer().start()
    try:
        yield server
    finally:
        server.stop()
