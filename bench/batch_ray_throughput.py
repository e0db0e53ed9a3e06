"""Batch throughput on a latency-bound backend: one process vs a two-node Ray cluster on this machine.

    .venv/bin/python bench/batch_ray_throughput.py [--latency 1.0] [--tasks 160] [--concurrency 16]
                                                   [--nodes 2] [--quick] [--json]

The backend is ``bench/_latency_server.py`` (its own process, every completion answered after exactly
``--latency`` seconds); the graph is the demo agent pointed at it (``--base-url``). Each run is a real
``retryctl batch`` process, as a user runs it:

- **one process**: ``retryctl batch TASKS --concurrency C`` (no ``--ray``);
- **ray**: ``retryctl batch TASKS --ray ADDRESS --concurrency C/nodes`` on a cluster of ``--nodes``
  nodes started here with ``ray start`` (``tests/_ray_cluster.py``: one CPU each, so one actor per node,
  each running ``C/nodes`` tasks at once): the same ``C`` tasks in flight in all.

The ideal is ``tasks x latency x calls_per_task / C`` (calls counted by the server, not assumed). Two
walls are printed per run: the whole process (imports, connecting, building the graph in every actor:
what a user waits for) and the task phase (from when the first tasks were sent, taken as the first
finished task's time less one task's server time, to the last result line), which is what the ideal
describes. Throughput is tasks over the task phase. The cluster's own start is timed and printed apart.
On one machine the cluster shares its cores with the driver and the server, so this measures the seam's
overhead, not a cluster's scale-out. Figures are printed, nothing is asserted.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # the cluster helper and the latency server's launcher live with the tests

from tests._ray_cluster import RayCluster  # noqa: E402
from tests.gateway._support import latency_upstream  # noqa: E402


def _stats(base_url: str, reset: bool = False) -> dict[str, Any]:
    root = base_url.removesuffix("/v1")
    if reset:
        request = urllib.request.Request(f"{root}/v1/stats/reset", data=b"", method="POST")
        with urllib.request.urlopen(request, timeout=5):
            return {}
    with urllib.request.urlopen(f"{root}/v1/stats", timeout=5) as reply:
        stats: dict[str, Any] = json.loads(reply.read())
    return stats


def _tasks(path: Path, n: int) -> None:
    rows = [{"id": f"t{i}", "question": f"What is 6 times 7? (task {i})", "gold": "42"} for i in range(n)]
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))


def run(label: str, extra: list[str], *, base_url: str, tasks: int, concurrency: int, tmp: Path,
        env: dict[str, str]) -> dict[str, Any]:  # fmt: skip
    """One ``retryctl batch`` process over ``tasks`` tasks; its walls, statuses and the server's counts."""
    task_file, out = tmp / f"tasks-{label}.jsonl", tmp / f"results-{label}.jsonl"
    _tasks(task_file, tasks)
    _stats(base_url, reset=True)
    args = [
        sys.executable, "-m", "retryctl.cli", "batch", str(task_file), "--out", str(out),
        "--base-url", base_url, "--model-name", "latency", "--breaker", "0", "--retry-wait", "0", "--json",
        *extra,
    ]  # fmt: skip
    began = time.perf_counter()
    proc = subprocess.Popen(
        args, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    assert proc.stderr is not None
    finished: list[float] = []
    for line in proc.stderr:  # one progress line per finished task (stderr under --json)
        if line.startswith("[") and "/" in line.split("]", 1)[0]:
            finished.append(time.perf_counter())
    stdout, _ = proc.communicate(timeout=60)
    ended = time.perf_counter()
    if proc.returncode != 0 or not finished:
        raise RuntimeError(f"{label}: retryctl batch exited {proc.returncode}: {stdout[-2000:]}")
    summary = json.loads(stdout)
    stats = _stats(base_url)
    per_task_server_s = stats["busy_s"] / tasks
    phase = finished[-1] - (finished[0] - per_task_server_s)
    return {
        "label": label,
        "tasks": tasks,
        "concurrency": concurrency,
        "process_s": ended - began,
        "phase_s": phase,
        "ideal_s": stats["busy_s"] / concurrency,
        "tasks_per_s": tasks / phase,
        "calls_per_task": stats["requests"] / tasks,
        "max_in_flight": stats["max_in_flight"],
        "statuses": summary["statuses"],
    }


def describe(row: dict[str, Any]) -> str:
    return (
        f"{row['label']:<12} {row['tasks']} tasks, {row['concurrency']} in flight: task phase "
        f"{row['phase_s']:6.2f} s ({row['tasks_per_s']:5.1f} tasks/s), ideal {row['ideal_s']:6.2f} s -> "
        f"{row['ideal_s'] / row['phase_s']:6.1%} of ideal; whole process {row['process_s']:6.2f} s; "
        f"{row['calls_per_task']:.2f} calls/task, {row['max_in_flight']} in flight at most, {row['statuses']}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--latency", type=float, default=1.0, help="seconds per completion")
    parser.add_argument("--tasks", type=int, default=160)
    parser.add_argument("--concurrency", type=int, default=16, help="tasks in flight in all (both modes)")
    parser.add_argument("--nodes", type=int, default=2, help="Ray nodes on this machine (one CPU each)")
    parser.add_argument("--quick", action="store_true", help="short latency, few tasks: check that it runs")
    parser.add_argument("--json", action="store_true", help="print one JSON object on the last line")
    args = parser.parse_args()
    latency, tasks, concurrency = args.latency, args.tasks, args.concurrency
    if args.quick:
        latency, tasks = 0.2, 4 * concurrency
    if concurrency % args.nodes:
        parser.error("--concurrency must be a multiple of --nodes (the same tasks in flight in both modes)")
    rows = []
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as name, latency_upstream(latency) as base_url:
        tmp = Path(name)
        cluster = RayCluster(nodes=args.nodes, cpus=1)
        env = {**cluster.env, "PYTHONPATH": str(ROOT)}
        common: dict[str, Any] = {
            "base_url": base_url,
            "tasks": tasks,
            "concurrency": concurrency,
            "tmp": tmp,
        }
        rows.append(run("one process", ["--concurrency", str(concurrency)], env=env, **common))
        began = time.perf_counter()
        cluster.start()
        try:
            cluster_s = time.perf_counter() - began
            per_node = str(concurrency // args.nodes)
            ray_args = ["--concurrency", per_node, "--ray", cluster.address]
            rows.append(run(f"ray {args.nodes} nodes", ray_args, env=env, **common))
        finally:
            cluster.stop()
    print(
        f"latency {latency * 1000:.0f} ms per completion, {tasks} tasks, {concurrency} in flight; "
        f"{os.cpu_count()} CPUs, load {load_before:.2f} -> {os.getloadavg()[0]:.2f}; "
        f"the {args.nodes}-node cluster took {cluster_s:.1f} s to start (not counted)"
    )
    for row in rows:
        print(describe(row))
    if args.json:
        print(json.dumps({"latency_s": latency, "cluster_start_s": cluster_s, "runs": rows}))


if __name__ == "__main__":
    main()
