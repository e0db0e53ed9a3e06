"""``retryctl batch --ray`` (bare: a cluster for the run) on a real single-node Ray cluster on
127.0.0.1, started by the run and stopped at its end: every task once in the results, the driver's
log verifies with every task's records, each worker built the graph once, the progress names the
node. (Two nodes and killed workers: ``tests/batch/test_ray_cluster.py``.) Slow to start on 2
cores: one test."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from retryctl.audit import read_records, verify_log
from retryctl.batch import read_results

pytest.importorskip("ray")

ROOT = Path(__file__).resolve().parents[2]
QUESTIONS = ["add 1 2", "hard 1", "add 3 4", "flaky 5", "add 6 7", "hard 2"]


@pytest.fixture
def ray_tmp() -> Iterator[Path]:
    # Short: Ray's unix sockets live under it (a socket path has a 107-byte limit).
    path = Path(tempfile.mkdtemp(prefix="rr.", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def test_a_batch_on_a_local_cluster_writes_each_task_once_with_its_records(
    tmp_path: Path, ray_tmp: Path
) -> None:
    tasks = tmp_path / "tasks.jsonl"
    rows = [{"id": f"t{i}", "question": q} for i, q in enumerate(QUESTIONS)]
    tasks.write_text("".join(json.dumps(row) + "\n" for row in rows))
    out, log, builds = tmp_path / "r.jsonl", tmp_path / "log.jsonl", tmp_path / "builds"
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "RETRYCTL_TEST_BUILDS": str(builds),
        "RAY_TMPDIR": str(ray_tmp),
        "RAY_AUTH_MODE": "disabled",
        "RAY_USAGE_STATS_ENABLED": "0",
    }
    args = [
        sys.executable,
        "-m",
        "retryctl.cli",
        "batch",
        str(tasks),
        "--graph",
        "tests.batch._ray_graphs:counted_build",
        "--out",
        str(out),
        "--log",
        str(log),
        "--retry-wait",
        "0",
        "--concurrency",
        "2",
        "--breaker",
        "0",
        "--ray",
    ]  # fmt: skip  (a bare --ray, last on the line: a cluster started for the run)
    done = subprocess.run(args, env=env, cwd=ROOT, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stdout + done.stderr

    lines = read_results(out).results
    assert sorted(line["id"] for line in lines) == [f"t{i}" for i in range(len(QUESTIONS))]
    assert all(line["status"] in ("accepted", "stopped") for line in lines)
    nodes = {line["node"] for line in lines}
    assert len(nodes) == 1  # one node: the local cluster

    assert verify_log(log).ok
    runs = Counter(getattr(r, "run_id", None) for r in read_records(log))
    assert set(runs) == {line["id"] for line in lines}
    assert runs["t1"] > runs["t0"]  # a hard task refines: its records all came back

    pids = builds.read_text().split()
    assert pids and len(pids) == len(set(pids)) < len(QUESTIONS)  # once per worker, not per task
    node = nodes.pop()
    # The run's lines (and anything Ray's driver prints while it goes) on stderr, the summary on stdout.
    assert f"[{node}: {len(QUESTIONS)}]" in done.stderr  # the per-node tally of the last line
    assert f"[{node}:" not in done.stdout
    assert "batch summary" in done.stdout
