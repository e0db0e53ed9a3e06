"""A real Arize Phoenix for tests and bench scripts: ``phoenix serve`` on 127.0.0.1, on free ports,
its database in a directory of the caller's, told to make no request off this machine.

Phoenix receives OTLP over HTTP at ``<url>/v1/traces`` and answers ``GET
<url>/v1/projects/<project>/spans`` with the spans it stored (flat attributes, events, ``parent_id``).
A span's project is its resource's ``openinference.project.name`` (``default`` without one).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

__all__ = ["Phoenix", "phoenix_command"]

START_TIMEOUT_S = 120.0
"""A cold start creates the database and runs its migrations: ~23 s on a busy 2-core machine."""


def phoenix_command() -> str | None:
    """The ``phoenix`` command of this interpreter's environment, or ``None`` (not installed)."""
    beside = Path(sys.executable).parent / "phoenix"
    if beside.exists():
        return str(beside)
    return shutil.which("phoenix")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class Phoenix:
    """One ``phoenix serve`` process (start with :meth:`start`, end with :meth:`stop`)."""

    def __init__(self, working_dir: Path, command: str) -> None:
        self.working_dir = working_dir
        self.command = command
        self.port = _free_port()
        self.grpc_port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.process: subprocess.Popen[bytes] | None = None
        self.started_in_s: float | None = None
        """Seconds from launch to the first healthy answer."""

    @property
    def traces_endpoint(self) -> str:
        """Where an ``OTLPSpanExporter`` (HTTP) sends spans."""
        return f"{self.url}/v1/traces"

    def environment(self) -> dict[str, str]:
        """The server's environment: this one without any Phoenix or OTel setting of the caller's."""
        env = {k: v for k, v in os.environ.items() if not k.startswith(("PHOENIX_", "OTEL_"))}
        env.update(
            PHOENIX_HOST="127.0.0.1",
            PHOENIX_PORT=str(self.port),
            PHOENIX_GRPC_PORT=str(self.grpc_port),
            PHOENIX_WORKING_DIR=str(self.working_dir),
            # Nothing off this machine: no analytics pixels, no web fonts, no sandbox download, no
            # assistant calling out.
            PHOENIX_TELEMETRY_ENABLED="false",
            PHOENIX_ALLOW_EXTERNAL_RESOURCES="false",
            PHOENIX_DISABLE_AGENT_ASSISTANT="true",
        )
        return env

    def start(self) -> None:
        """Launch the server and wait until ``/healthz`` answers (its output goes to ``server.log``)."""
        self.working_dir.mkdir(parents=True, exist_ok=True)
        log = (self.working_dir / "server.log").open("wb")
        began = time.monotonic()
        self.process = subprocess.Popen(
            [self.command, "serve"],
            env=self.environment(),
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group: stop() ends its workers too
        )
        deadline = began + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"phoenix serve exited {self.process.returncode}: {self.tail()}")
            try:
                with urllib.request.urlopen(f"{self.url}/healthz", timeout=2) as answer:
                    if answer.status == 200:
                        self.started_in_s = time.monotonic() - began
                        return
            except OSError:
                pass
            time.sleep(0.25)
        self.stop()
        raise RuntimeError(f"phoenix serve was not healthy after {START_TIMEOUT_S:.0f} s: {self.tail()}")

    def tail(self, lines: int = 30) -> str:
        """The end of the server's output, for a failure message."""
        path = self.working_dir / "server.log"
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:]) if path.exists() else ""

    def stop(self) -> None:
        """End the server (SIGTERM to its group, SIGKILL after 15 s)."""
        process, self.process = self.process, None
        if process is None or process.poll() is not None:
            return
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=15)

    def spans(self, project: str = "default") -> list[dict[str, Any]]:
        """Every span stored in ``project``, oldest first, through the REST API (all pages)."""
        found: list[dict[str, Any]] = []
        cursor: str | None = None
        while True:
            query = "limit=1000" + (f"&cursor={cursor}" if cursor else "")
            with urllib.request.urlopen(f"{self.url}/v1/projects/{project}/spans?{query}", timeout=10) as r:
                page = json.load(r)
            found += page["data"]
            cursor = page.get("next_cursor")
            if not cursor:
                return found

    def wait_for_spans(self, project: str, count: int, timeout_s: float = 30.0) -> list[dict[str, Any]]:
        """The project's spans once at least ``count`` are stored (Phoenix inserts in batches)."""
        deadline = time.monotonic() + timeout_s
        spans: list[dict[str, Any]] = []
        while time.monotonic() < deadline:
            try:
                spans = self.spans(project)
            except urllib.error.HTTPError as exc:
                if exc.code != 404:  # 404: the project does not exist until its first span
                    raise
            if len(spans) >= count:
                return spans
            time.sleep(0.25)
        return spans

    def remote_peers(self) -> set[str]:
        """The addresses the server's processes hold connections to (all should be 127.0.0.1)."""
        import psutil  # type: ignore[import-untyped]  # a dependency of arize-phoenix, no stubs

        assert self.process is not None
        peers: set[str] = set()
        root = psutil.Process(self.process.pid)
        for proc in [root, *root.children(recursive=True)]:
            for conn in proc.net_connections(kind="inet"):
                if conn.raddr:
                    peers.add(conn.raddr.ip)
        return peers
