"""Real faults from real clients: a local server (``tests/models/_fault_server.py``) that hangs, resets the
connection or answers a scripted status, a closed port, and one function per client that makes one request
and returns the exception it raised."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Callable
from dataclasses import dataclass

from tests.models._fault_server import FaultServer, Reply, hang, reset, status

TIMEOUT_S = 0.3
"""The clients' read timeout: what a hanging server makes them wait."""


@dataclass(frozen=True)
class Fault:
    """One way for a request to fail: the server's reply (None: nobody listens) and what it means."""

    name: str
    reply: Callable[[], Reply] | None
    error_class: str
    status: int | None = None
    retry_after_s: float | None = None

    @property
    def http(self) -> bool:
        return self.status is not None


FAULTS = [
    Fault("hang", hang, "transient"),
    Fault("reset", reset, "transient"),
    Fault("refused", None, "transient"),
    Fault("429", lambda: status(429, retry_after="3"), "transient", 429, 3.0),
    Fault("503", lambda: status(503), "transient", 503),
    Fault("400", lambda: status(400), "validation", 400),
    Fault("401", lambda: status(401), "terminal", 401),
    Fault("404", lambda: status(404), "terminal", 404),
]
NETWORK = [f for f in FAULTS if not f.http]


def closed_port() -> int:
    """A port nobody listens on (bound, then released): a connection to it is refused."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port


def base_url(server: FaultServer, fault: Fault) -> str:
    """The server's root with ``fault`` scripted, or a closed port's."""
    if fault.reply is None:
        return f"http://127.0.0.1:{closed_port()}"
    server.script.append(fault.reply())
    return server.url.removesuffix("/v1")


def raised(call: Callable[[], object]) -> BaseException:
    """The exception ``call`` raised (it must raise)."""
    try:
        call()
    except BaseException as exc:
        return exc
    raise AssertionError(f"{call} did not raise")


def araised(call: Callable[[], object]) -> BaseException:
    """The exception the coroutine ``call()`` raised, run on a fresh event loop."""

    async def run() -> None:
        await call()  # type: ignore[misc]

    return raised(lambda: asyncio.run(run()))
