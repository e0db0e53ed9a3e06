"""Shared pieces of the gateway tests: an in-process client, request bodies, a gateway process."""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx

from retryctl.gateway import Gateway, GatewayConfig, create_app


def chat(content: str = "6 * 7?", *, model: str = "scripted", **extra: Any) -> dict[str, Any]:
    """A chat completion request body."""
    return {"model": model, "messages": [{"role": "user", "content": content}], **extra}


def adaptive(content: str = "6 * 7?", *, model: str = "scripted", **options: Any) -> dict[str, Any]:
    """An adaptive request body with ``options`` as its ``retryctl`` block."""
    return chat(content, model=model, adaptive=True, retryctl=options)


_RUNNERS: dict[Gateway, asyncio.Runner] = {}


def close_gateways() -> None:
    """Close every gateway :func:`call` used (its clients, on its own loop), then the loops."""
    while _RUNNERS:
        gateway, runner = _RUNNERS.popitem()
        runner.run(gateway.aclose())
        runner.close()


def call(gateway: Gateway, method: str, path: str, body: Any = None) -> httpx.Response:
    """One request to ``gateway``'s app in this process (httpx's ASGI transport). Every call to one
    gateway runs on the same event loop, as in a server: its upstream clients keep their connections."""
    runner = _RUNNERS.get(gateway)
    if runner is None:
        runner = _RUNNERS[gateway] = asyncio.Runner()

    async def go() -> httpx.Response:
        app = create_app(gateway.config, gateway=gateway)
        # As a server would: an exception the app raised is its 500 response, not the client's error.
        transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
        async with httpx.AsyncClient(transport=transport, base_url="http://gateway") as client:
            if isinstance(body, bytes):
                return await client.request(method, path, content=body)
            return await client.request(method, path, json=body)

    return runner.run(go())


LATENCY_SERVER = Path(__file__).resolve().parents[2] / "bench" / "_latency_server.py"
"""The benchmarks' fixed-latency upstream (a real HTTP server on 127.0.0.1, in its own process)."""


@contextmanager
def latency_upstream(latency: float) -> Iterator[str]:
    """bench/_latency_server.py answering every completion after ``latency`` seconds; its /v1 URL."""
    proc = subprocess.Popen(
        [sys.executable, str(LATENCY_SERVER), "--latency", str(latency)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None
        port = proc.stdout.readline().split()[1]
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextmanager
def serving(
    *args: str, log: Path | None = None, env: dict[str, str] | None = None
) -> Iterator[tuple[str, Any]]:
    """``retryctl serve ARGS`` as a real process on a free port; yields its /v1 URL and the process.
    Always terminated; its stderr is shown if it does not come up."""
    port = free_port()
    command = [sys.executable, "-m", "retryctl.cli", "serve", *args, "--port", str(port)]
    if log is not None:
        command += ["--log", str(log)]
    proc = subprocess.Popen(
        command,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, **(env or {})},
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"retryctl serve exited {proc.returncode}:\n{proc.stderr.read()}")  # type: ignore[union-attr]
            try:
                if httpx.get(url + "/health", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError("retryctl serve did not come up in 120 s")
            time.sleep(0.1)
        yield url + "/v1", proc
    finally:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def config(**kwargs: Any) -> GatewayConfig:
    """A config for a gateway built around a scripted upstream (the source is not used then); the
    scripted model is not the embedded one, so no calibration unless a test asks for one."""
    return GatewayConfig(embedded=True, **{"calibration": "none", **kwargs})
