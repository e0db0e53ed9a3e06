"""Fixtures shared by the whole suite."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import NoReturn

import pytest

from tests.models._fault_server import FaultServer

SHARED_BANK = Path(__file__).resolve().parents[2] / "shared" / "banks" / "last_letters_gpt35.jsonl"
"""The real sample bank, which lives beside the clone (``../shared``), never inside the project."""

REDIS_URL = os.environ.get("RETRYCTL_REDIS_URL", "redis://127.0.0.1:6390/0")
"""The test Redis (``make services`` starts it)."""
POSTGRES_URL = os.environ.get("RETRYCTL_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5490/postgres")
"""The test PostgreSQL (``make services`` starts it)."""


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


def _unreachable(what: str, url: str, exc: Exception) -> NoReturn:
    """A developer without the server skips; CI, which starts it (``make services``), must not."""
    if os.environ.get("CI"):
        pytest.fail(f"CI starts {what} (make services), but {url} is unreachable: {exc}")
    pytest.skip(f"no {what} at {url} (make services starts one): {exc}")


@pytest.fixture(scope="session")
def redis_url() -> str:
    """The test Redis server's URL, once it answers a ping."""
    import redis

    try:
        with redis.Redis.from_url(REDIS_URL, socket_connect_timeout=2) as client:
            client.ping()
    except redis.ConnectionError as exc:
        _unreachable("Redis", REDIS_URL, exc)
    return REDIS_URL


@pytest.fixture(scope="session")
def postgres_url() -> str:
    """The test PostgreSQL server's URL, once a connection opens."""
    import psycopg

    try:
        psycopg.connect(POSTGRES_URL, connect_timeout=2).close()
    except psycopg.OperationalError as exc:
        _unreachable("PostgreSQL", POSTGRES_URL, exc)
    return POSTGRES_URL
