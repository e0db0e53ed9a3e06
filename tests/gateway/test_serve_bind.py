"""``retryctl serve`` says "serving" only once its socket is bound and listening; an address it cannot
bind (a busy ``--port``) is one ``problem:`` line naming the option and exit 2, with nothing announced."""

from __future__ import annotations

import re
import socket
import subprocess
import sys

import httpx
import pytest

# The upstream is never called: the gateway only has to start.
_UPSTREAM = ["--upstream", "http://127.0.0.1:9/v1", "--upstream-model", "m"]


def _serve(*args: str) -> list[str]:
    return [sys.executable, "-m", "retryctl.cli", "serve", *_UPSTREAM, *args]


class TestBind:
    def test_a_busy_port_is_exit_2_naming_the_option_and_nothing_is_announced(self) -> None:
        with socket.socket() as taken:
            taken.bind(("127.0.0.1", 0))
            taken.listen()
            port = taken.getsockname()[1]
            done = subprocess.run(
                _serve("--port", str(port)), capture_output=True, text=True, timeout=60, check=False
            )
        assert done.returncode == 2
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1  # no "serving", no traceback
        assert lines[0].startswith(f"problem: --port: {port} is already in use on 127.0.0.1")

    def test_a_host_it_cannot_listen_on_is_exit_2_naming_the_option(self) -> None:
        # 192.0.2.1 (TEST-NET-1) is no address of this machine: binding to it fails at once.
        done = subprocess.run(
            _serve("--host", "192.0.2.1", "--port", "0"),
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert done.returncode == 2
        assert done.stderr.startswith("problem: --host: cannot listen on 192.0.2.1:0")
        assert "serving" not in done.stderr and "Traceback" not in done.stderr

    @pytest.mark.parametrize("workers", [1, 2])
    def test_serving_is_said_once_bound_with_the_port_really_bound(self, workers: int) -> None:
        proc = subprocess.Popen(
            _serve("--port", "0", "--workers", str(workers)), stderr=subprocess.PIPE, text=True
        )
        try:
            assert proc.stderr is not None
            line = proc.stderr.readline()
            found = re.search(r"serving 'm' from \S+ on http://127\.0\.0\.1:(\d+)/v1$", line.strip())
            assert found is not None, line
            port = int(found.group(1))
            assert port != 0  # --port 0: the port the system chose, not the one asked for
            # At once, before uvicorn has even imported the app: the connection waits in the backlog
            # and is answered, never refused.
            with socket.create_connection(("127.0.0.1", port), timeout=5):
                pass
            response = httpx.get(f"http://127.0.0.1:{port}/health", timeout=60)
            assert response.status_code == 200 and response.json()["status"] == "ok"
        finally:
            proc.terminate()
            proc.wait(timeout=30)
