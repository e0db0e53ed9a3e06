"""``retryctl batch --ray ADDRESS`` on a real two-node Ray cluster on this machine, with faults.

The cluster (:class:`tests._ray_cluster.RayCluster`): a head and a second node, each ``ray start
--node-ip-address 127.0.0.1 --num-cpus 1``, started once for the module and stopped at its end,
only its own processes (never ``ray stop``, which would stop other clusters on the machine). The
model is bench/_latency_server.py (a real HTTP server on 127.0.0.1 answering every completion after
a fixed delay) behind the demo agent (``--base-url``), so tasks take long enough to be caught in
flight. Every batch runs as a real ``retryctl`` process, as a user runs it.

- One node's worker processes killed mid-batch (SIGKILL, as the OOM killer would): every task is in
  the results exactly once, the decision log verifies and ``retryctl audit`` explains one run per
  task, the summary counts every task, and both nodes ran tasks.
- The driver killed mid-batch: ``--resume`` finishes the rest, every task exactly once.
- Ctrl-C mid-batch (SIGINT, no ``--json``): exit 130, and none of Ray's "retries remaining" messages
  for the calls out, on stdout or stderr.
- Every node registered under an address of this machine's own interfaces (first, while both live).
- The second node killed whole mid-batch (raylet, agents, workers: a lost machine), last in the
  module: every task exactly once, the rest finished on the head.

Slow (a cluster start is 25-35 s on two busy cores, the module about 3.5 minutes): one cluster for
the module.
"""

from __future__ import annotations

import fcntl
import ipaddress
import json
import os
import re
import signal
import socket
import struct
import subprocess
import sys
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from retryctl.audit import read_records, verify_log
from tests._ray_cluster import RayCluster
from tests.gateway._support import latency_upstream

pytest.importorskip("ray", reason="the ray extra (retryctl[ray]) is not installed")
if not sys.platform.startswith("linux"):
    pytest.skip("the cluster helper reads /proc", allow_module_level=True)

ROOT = Path(__file__).resolve().parents[2]
LATENCY_S = 1.0
"""Per completion: a task takes about a second, so a batch is seconds long and has tasks in flight."""
PROGRESS = re.compile(r"^\[(\d+)/(\d+)\] \[([^\]]*)\] ")
"""A finished task's progress line under ``--ray``: ``[k/N] [node: n · node: n] <id>: ...``."""


@pytest.fixture(scope="module")
def cluster() -> Iterator[RayCluster]:
    ray_cluster = RayCluster(nodes=2, cpus=1)
    ray_cluster.start()
    try:
        yield ray_cluster
    finally:
        ray_cluster.stop()
    assert not ray_cluster.leftovers(), "the cluster's processes outlived stop()"


@pytest.fixture(scope="module")
def upstream() -> Iterator[str]:
    with latency_upstream(LATENCY_S) as url:
        yield url


def _tasks(path: Path, n: int) -> list[str]:
    ids = [f"t{i:03d}" for i in range(n)]
    rows = [{"id": i, "question": f"What is 6 times 7? (task {i})", "gold": "42"} for i in ids]
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return ids


def _batch(tasks: Path, out: Path, log: Path, cluster: RayCluster, upstream: str, *more: str) -> list[str]:
    return [
        sys.executable, "-m", "retryctl.cli", "batch", str(tasks), "--out", str(out), "--log", str(log),
        "--base-url", upstream, "--model-name", "latency", "--concurrency", "4", "--breaker", "0",
        "--retry-wait", "0", "--json", "--ray", cluster.address, *more,
    ]  # fmt: skip


def _start(args: list[str], cluster: RayCluster) -> subprocess.Popen[str]:
    env = {**cluster.env, "PYTHONPATH": str(ROOT)}
    # Its own session: killing the driver kills nothing else of the test's.
    return subprocess.Popen(
        args,
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )


def _until(proc: subprocess.Popen[str], enough: Callable[[int, dict[str, int]], bool]) -> list[str]:
    """Read the batch's progress (stderr under ``--json``) until ``enough(done, per_node)`` holds; the
    lines read. Fails if the batch ends first."""
    assert proc.stderr is not None
    seen = []
    for line in proc.stderr:
        seen.append(line)
        match = PROGRESS.match(line)
        if match is None:
            continue
        counts = {
            node: int(n) for node, _, n in (part.partition(": ") for part in match.group(3).split(" · "))
        }
        if enough(int(match.group(1)), counts):
            return seen
    proc.wait(timeout=60)
    raise AssertionError(
        f"the batch ended (exit {proc.returncode}) before the fault: {''.join(seen)[-3000:]}"
    )


def _lines(out: Path) -> list[dict[str, Any]]:
    # The raw file, not read_results: that would fold a duplicate into one.
    return [json.loads(line) for line in out.read_text().splitlines() if line.strip()]


def _audit(log: Path) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, "-m", "retryctl.cli", "audit", str(log), "--json"],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    report: dict[str, Any] = json.loads(done.stdout)
    return report


def _own_addresses() -> set[str]:
    """This machine's own addresses: each interface's IPv4 address (``SIOCGIFADDR``) and every IPv6 one."""
    found: set[str] = set()
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        for _, name in socket.if_nameindex():
            request = struct.pack("256s", name.encode()[:15])
            try:
                answer = fcntl.ioctl(sock.fileno(), 0x8915, request)  # SIOCGIFADDR
            except OSError:  # an interface without an IPv4 address
                continue
            found.add(socket.inet_ntoa(answer[20:24]))
    inet6 = Path("/proc/net/if_inet6")
    if inet6.exists():
        for line in inet6.read_text().splitlines():
            found.add(str(ipaddress.IPv6Address(bytes.fromhex(line.split()[0]))))
    return found


class TestNodeAddresses:
    def test_every_node_registered_under_an_address_of_this_machine(self, cluster: RayCluster) -> None:
        # Given --node-ip-address 127.0.0.1, Ray on Linux registers a node under the address this
        # machine reaches others from (resolve_ip_for_localhost): the guard that the cluster's traffic
        # goes to this machine's own interfaces and to no other host.
        script = (
            f"import json, ray; ray.init(address={cluster.address!r}, log_to_driver=False); "
            "print(json.dumps([n['NodeManagerAddress'] for n in ray.nodes() if n['Alive']]))"
        )
        done = subprocess.run(
            [sys.executable, "-c", script],
            env=cluster.env,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert done.returncode == 0, done.stdout + done.stderr
        addresses = json.loads(done.stdout.strip().splitlines()[-1])
        assert len(addresses) == cluster.nodes
        own = _own_addresses()
        assert set(addresses) <= own, (addresses, sorted(own))


class TestWorkersKilledMidBatch:
    def test_every_task_once_the_log_verifies_and_both_nodes_ran_tasks(
        self, tmp_path: Path, cluster: RayCluster, upstream: str
    ) -> None:
        ids = _tasks(tmp_path / "tasks.jsonl", 40)
        out, log = tmp_path / "results.jsonl", tmp_path / "decisions.jsonl"
        head, second = (node[:8] for node in cluster.node_ids)
        proc = _start(_batch(tmp_path / "tasks.jsonl", out, log, cluster, upstream), cluster)
        try:
            # Mid-batch: the second node has finished a few tasks and most are still to come.
            seen = _until(proc, lambda done, nodes: nodes.get(second, 0) >= 2 and done <= len(ids) // 2)
            killed = cluster.kill_workers(1)
            stdout, stderr = proc.communicate(timeout=600)
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=30)
        assert proc.returncode == 0, "".join(seen) + stderr + cluster.log_tail()
        # The kill hit the batch's actor on that node, not only idle workers.
        assert any(p.argv[0].startswith("ray::_Worker") for p in killed), [p.argv for p in killed]

        lines = _lines(out)
        assert Counter(line["id"] for line in lines) == Counter(ids)  # every task, exactly once
        assert {line["status"] for line in lines} == {"accepted"}
        assert {line["node"] for line in lines} == {head, second}

        summary = json.loads(stdout)
        assert (summary["tasks"], summary["finished"], summary["errors"]) == (len(ids), len(ids), 0)
        assert summary["statuses"] == {"accepted": len(ids)} and summary["accuracy"] == 1.0

        assert verify_log(log).ok
        assert {getattr(r, "run_id", None) for r in read_records(log)} == set(ids)
        report = _audit(log)
        assert report["ok"] is True and report["summary"]["overview"]["runs"] == len(ids)


class TestDriverKilledMidBatch:
    def test_resume_finishes_every_task_exactly_once(
        self, tmp_path: Path, cluster: RayCluster, upstream: str
    ) -> None:
        ids = _tasks(tmp_path / "tasks.jsonl", 24)
        out, log = tmp_path / "results.jsonl", tmp_path / "decisions.jsonl"
        args = _batch(tmp_path / "tasks.jsonl", out, log, cluster, upstream)
        proc = _start(args, cluster)
        try:
            _until(proc, lambda done, nodes: done >= 4)
        finally:
            os.killpg(proc.pid, signal.SIGKILL)  # the driver: no goodbye, no flush
            proc.wait(timeout=30)
        kept = {line["id"] for line in _lines(out)}
        assert 4 <= len(kept) < len(ids)

        again = _start([*args, "--resume"], cluster)
        stdout, stderr = again.communicate(timeout=600)
        assert again.returncode == 0, stderr + cluster.log_tail()
        assert f"resuming: {len(kept)} of {len(ids)} tasks already finished" in stderr

        lines = _lines(out)
        assert Counter(line["id"] for line in lines) == Counter(ids)
        summary = json.loads(stdout)
        assert (summary["tasks"], summary["finished"], summary["errors"]) == (len(ids), len(ids), 0)
        assert verify_log(log).ok
        assert {getattr(r, "run_id", None) for r in read_records(log)} >= set(ids)
        assert _audit(log)["ok"] is True


class TestInterruptedMidBatch:
    def test_ctrl_c_exits_130_without_rays_retry_messages(
        self, tmp_path: Path, cluster: RayCluster, upstream: str
    ) -> None:
        # As the user saw it: no --json, so the summary would be stdout's; calls out when Ctrl-C comes.
        ids = _tasks(tmp_path / "tasks.jsonl", 24)
        out, log = tmp_path / "results.jsonl", tmp_path / "decisions.jsonl"
        args = [a for a in _batch(tmp_path / "tasks.jsonl", out, log, cluster, upstream) if a != "--json"]
        proc = _start(args, cluster)
        try:
            seen = _until(proc, lambda done, nodes: done >= 2)
            os.killpg(proc.pid, signal.SIGINT)  # what a terminal's Ctrl-C sends: the whole group
            stdout, stderr = proc.communicate(timeout=300)
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=30)
        everything = "".join(seen) + stderr
        assert proc.returncode == 130, everything + stdout
        assert "interrupted:" in stderr and "--resume" in stderr
        assert "(raylet)" not in stdout, stdout
        assert "retries remaining" not in everything + stdout, everything + stdout
        kept = {line["id"] for line in _lines(out)}
        assert 2 <= len(kept) < len(ids)
        assert verify_log(log).ok


class TestNodeKilledMidBatch:
    """Last in the module: the second node stays dead."""

    def test_every_task_once_on_the_surviving_node(
        self, tmp_path: Path, cluster: RayCluster, upstream: str
    ) -> None:
        ids = _tasks(tmp_path / "tasks.jsonl", 40)
        out, log = tmp_path / "results.jsonl", tmp_path / "decisions.jsonl"
        head, second = (node[:8] for node in cluster.node_ids)
        proc = _start(_batch(tmp_path / "tasks.jsonl", out, log, cluster, upstream), cluster)
        try:
            seen = _until(proc, lambda done, nodes: nodes.get(second, 0) >= 2 and done <= len(ids) // 2)
            killed = cluster.kill_node(1)
            stdout, stderr = proc.communicate(timeout=600)
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=30)
        assert proc.returncode == 0, "".join(seen) + stderr + cluster.log_tail()
        assert any(p.argv and p.argv[0].endswith("raylet") for p in killed)
        assert not cluster.processes(1)

        lines = _lines(out)
        assert Counter(line["id"] for line in lines) == Counter(ids)
        assert {line["status"] for line in lines} == {"accepted"}
        assert {line["node"] for line in lines} == {head, second}
        summary = json.loads(stdout)
        assert (summary["tasks"], summary["finished"], summary["errors"]) == (len(ids), len(ids), 0)
        assert verify_log(log).ok
        assert {getattr(r, "run_id", None) for r in read_records(log)} == set(ids)
        assert _audit(log)["ok"] is True
