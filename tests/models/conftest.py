"""Fixtures for the backend tests: the fault server, the embedded model and a llama.cpp server.

Tests that need the ``local`` extra skip only when ``llama_cpp`` is not importable.
"""

from __future__ import annotations

import importlib.util
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

HAS_LLAMA = importlib.util.find_spec("llama_cpp") is not None
needs_llama = pytest.mark.skipif(
    not HAS_LLAMA, reason="llama_cpp is not importable: install the 'local' extra"
)


@pytest.fixture(scope="session")
def gguf_path() -> Path:
    from retryctl.models import find_smollm2_gguf

    return find_smollm2_gguf()


@pytest.fixture(scope="session")
def embedded(gguf_path: Path):
    from retryctl.models import EmbeddedBackend

    backend = EmbeddedBackend(model_path=gguf_path, n_ctx=1024)
    yield backend
    backend.close()


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture(scope="session")
def llama_server(gguf_path: Path) -> Iterator[str]:
    """``python -m llama_cpp.server`` on a free port; yields its /v1 URL; always terminated."""
    port = _free_port()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "llama_cpp.server",
            "--model",
            str(gguf_path),
            "--model_alias",
            "smollm2",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--n_ctx",
            "1024",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    ready = threading.Event()
    log: list[str] = []

    def watch() -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            log.append(line)
            if "Uvicorn running on" in line:
                ready.set()
        ready.set()  # the process ended: stop waiting

    threading.Thread(target=watch, daemon=True).start()
    try:
        if not ready.wait(timeout=120) or proc.poll() is not None:
            raise RuntimeError("llama_cpp.server did not start:\n" + "".join(log[-30:]))
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
