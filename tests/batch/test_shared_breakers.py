"""``retryctl batch --breakers redis://...``: the demo agent's breakers live in a real Redis (a private
``redis-server`` on 127.0.0.1), so every worker, in this process or another, on this node or another,
reads one state. A failing upstream (a real HTTP server answering 500, counting its requests) opens
them; a later batch (a new graph and a new Redis client, as another worker has) is refused by the open
breakers without one call to the upstream. Under ``--ray`` (a single-node cluster started for the run)
the workers open the same breakers in the same Redis."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from retryctl.audit import VerdictRecord, read_records, verify_log
from retryctl.batch import read_results
from retryctl.cli import app
from retryctl.controller import Breaker
from tests.models._fault_server import FaultServer, status

pytest.importorskip("redis", reason="the workers extra (redis) is not installed")

ROOT = Path(__file__).resolve().parents[2]
MEMBERS = {"m": "open", "calculator": "open", "python": "open"}
"""The demo agent's members, by breaker key: the model (``--model-name m``) and its two tool members."""
REFUSED = "breaker of 'm' is open"

runner = CliRunner()


@pytest.fixture
def redis_url(tmp_path: Path) -> Iterator[str]:
    """A private redis-server on a free 127.0.0.1 port, killed at the end."""
    binary = shutil.which("redis-server")
    if binary is None:
        if os.environ.get("CI"):
            pytest.fail("CI installs redis-server (make services), but it is not on PATH")
        pytest.skip("redis-server is not installed (make services installs it)")
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = int(sock.getsockname()[1])
    args = [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]
    proc = subprocess.Popen([*args, "--dir", str(tmp_path)], stdout=subprocess.DEVNULL)
    url = f"redis://127.0.0.1:{port}/0"
    import redis

    deadline = time.monotonic() + 10
    while True:
        try:
            with redis.Redis.from_url(url, socket_connect_timeout=0.2) as client:
                client.ping()
            break
        except redis.ConnectionError:
            if time.monotonic() > deadline:
                proc.kill()
                pytest.fail(f"redis-server did not answer on {url}")
            time.sleep(0.05)
    try:
        yield url
    finally:
        proc.kill()
        proc.wait()


@pytest.fixture
def failing() -> Iterator[FaultServer]:
    """An OpenAI-compatible server on 127.0.0.1 answering every request 500."""
    server = FaultServer(default=status(500)).start()
    try:
        yield server
    finally:
        server.stop()


def _tasks(path: Path, prefix: str, n: int) -> Path:
    question = "Li buys 2 boxes with 9 pens in each box. How many pens does Li buy?"
    path.write_text(
        "".join(json.dumps({"id": f"{prefix}{i}", "question": question}) + "\n" for i in range(n))
    )
    return path


def _args(tasks: Path, out: Path, log: Path, upstream: str, breakers: str) -> list[str]:
    return [
        "batch", str(tasks), "--out", str(out), "--log", str(log), "--base-url", upstream,
        "--model-name", "m", "--breakers", breakers, "--breaker", "0", "--retry-wait", "0",
        "--retries", "1", "--concurrency", "1",
    ]  # fmt: skip


def _states(url: str) -> dict[str, str]:
    from retryctl.runtime import RedisBreakerStore

    with RedisBreakerStore.from_url(url) as store:
        return Breaker(store=store).states()


def _refused(log: Path, ids: set[str]) -> set[str]:
    """The tasks of ``ids`` whose every verdict was a stop by the open breaker, before any call."""
    verdicts: dict[str, list[tuple[str, str]]] = {}
    for record in read_records(log):
        if isinstance(record, VerdictRecord) and record.run_id in ids:
            verdicts.setdefault(record.run_id, []).append((str(record.action), record.reason))
    return {run for run, said in verdicts.items() if all(a == "stop" and REFUSED in r for a, r in said)}


class TestSharedBreakers:
    def test_a_failing_upstream_opens_the_shared_breakers_and_a_later_batch_calls_it_no_more(
        self, tmp_path: Path, redis_url: str, failing: FaultServer
    ) -> None:
        log = tmp_path / "log.jsonl"
        first = runner.invoke(
            app, _args(_tasks(tmp_path / "a.jsonl", "a", 6), tmp_path / "a.out", log, failing.url, redis_url)
        )
        assert first.exit_code == 0, first.output
        calls = len(failing.requests)
        assert calls > 0  # the first tasks called the upstream, and failed
        assert _states(redis_url) == MEMBERS  # in Redis, for every worker to read

        # Another batch: a graph built again, a new Redis client (another worker's, or another node's).
        second = runner.invoke(
            app, _args(_tasks(tmp_path / "b.jsonl", "b", 4), tmp_path / "b.out", log, failing.url, redis_url)
        )
        assert second.exit_code == 0, second.output
        assert len(failing.requests) == calls  # refused by the open breakers: not one call
        lines = read_results(tmp_path / "b.out").results
        assert sorted(line["id"] for line in lines) == ["b0", "b1", "b2", "b3"]
        assert {line["status"] for line in lines} == {"stopped"}
        assert _refused(log, {"b0", "b1", "b2", "b3"}) == {"b0", "b1", "b2", "b3"}
        assert verify_log(log).ok

    def test_memory_keeps_the_breakers_in_the_batch_alone(self, tmp_path: Path, failing: FaultServer) -> None:
        tasks = _tasks(tmp_path / "a.jsonl", "a", 6)
        result = runner.invoke(
            app, _args(tasks, tmp_path / "a.out", tmp_path / "l.jsonl", failing.url, "memory")
        )
        assert result.exit_code == 0, result.output
        # Within the batch the breakers open all the same: the last tasks were refused.
        assert "a5" in _refused(tmp_path / "l.jsonl", {f"a{i}" for i in range(6)})

    @pytest.mark.parametrize("value", ["redis", "sqlite:", "memory:x", "postgres://h/0"])
    def test_a_value_that_is_no_store_is_named_before_any_task_runs(self, tmp_path: Path, value: str) -> None:
        out = tmp_path / "r.jsonl"
        args = _args(
            _tasks(tmp_path / "t.jsonl", "t", 1), out, tmp_path / "l.jsonl", "http://127.0.0.1:9/v1", value
        )
        result = runner.invoke(app, args)
        assert result.exit_code == 2, result.output
        assert f"invalid --breakers={value!r}" in result.output
        assert not out.exists() or out.stat().st_size == 0


def test_the_workers_of_a_ray_batch_open_the_same_breakers(
    tmp_path: Path, redis_url: str, failing: FaultServer
) -> None:
    pytest.importorskip("ray", reason="the ray extra (retryctl[ray]) is not installed")
    ray_tmp = Path(tempfile.mkdtemp(prefix="rb.", dir="/tmp"))  # short: Ray's unix socket paths
    n = 12
    ids = {f"r{i}" for i in range(n)}
    out, log = tmp_path / "r.out", tmp_path / "log.jsonl"
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "RAY_TMPDIR": str(ray_tmp),
        "RAY_AUTH_MODE": "disabled",
        "RAY_USAGE_STATS_ENABLED": "0",
    }
    args = _args(_tasks(tmp_path / "r.jsonl", "r", n), out, log, failing.url, redis_url)
    command = [sys.executable, "-m", "retryctl.cli", *args, "--ray"]
    try:
        done = subprocess.run(
            command, env=env, cwd=ROOT, capture_output=True, text=True, timeout=300, check=False
        )
    finally:
        shutil.rmtree(ray_tmp, ignore_errors=True)
    assert done.returncode == 0, done.stdout + done.stderr
    lines = read_results(out).results
    assert {line["id"] for line in lines} == ids
    assert len({line["node"] for line in lines}) == 1
    assert _states(redis_url) == MEMBERS
    refused = _refused(log, ids)
    assert refused  # later tasks, on whichever worker, were refused by breakers others opened
    # A refused task called nothing: the calls are those of the tasks that ran before the breakers opened.
    assert len(failing.requests) <= (n - len(refused)) * 12
    assert verify_log(log).ok
