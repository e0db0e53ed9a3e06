"""Batch throughput against a fixed-latency local server, as a fraction of the ideal, at concurrency 1, 8, 64.

    .venv/bin/python bench/batch_throughput.py [--latency 0.2] [--waves 6] [--concurrency 1 8 64]
                                               [--quick] [--json]

The server (``bench/_latency_server.py``, its own process) answers every chat completion after exactly
``--latency`` seconds. ``retryctl.batch.run_batch`` runs the demo agent (``build_demo_graph`` pointed at
the server by base URL, with a real ``DecisionLog`` and results file, as ``retryctl batch --log`` does)
over ``concurrency x waves`` tasks. The ideal wall time is ``tasks * latency * calls_per_task /
concurrency``, where ``calls_per_task`` is counted by the server, not assumed; the figure is
ideal / achieved. Target: >= 90 % at concurrency 64.

Client CPU per task is printed too, with what it predicts. With a fixed latency the tasks of a wave get
their answers together, and the event loop serves them round-robin (every ``await`` goes to the back of
the queue), so each finishes only when the whole wave's CPU work is done, and the next wave starts
together again: a wave takes about ``latency * calls + concurrency * cpu_per_task``, i.e. a fraction of
``latency * calls / (latency * calls + concurrency * cpu_per_task)`` (the "wave bound"). At high
concurrency that bound, not the server or the runner's semaphore, is what limits the figure.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

from retryctl.agent import build_demo_graph
from retryctl.audit import DecisionLog
from retryctl.batch import BatchConfig, ResultsFile, Task, run_batch

TARGET = 0.90
TARGET_AT = 64
SERVER = Path(__file__).with_name("_latency_server.py")


class Server:
    """The latency server in a child process (so its work does not share the client's GIL)."""

    def __init__(self, latency_s: float) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, str(SERVER), "--latency", str(latency_s)],
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line.startswith("port "):
            self.proc.kill()
            raise RuntimeError(f"latency server did not start: {line!r}")
        self.root = f"http://127.0.0.1:{int(line.split()[1])}"

    @property
    def base_url(self) -> str:
        return f"{self.root}/v1"

    def stats(self) -> dict[str, int]:
        with urllib.request.urlopen(f"{self.root}/v1/stats", timeout=5) as reply:
            stats: dict[str, int] = json.loads(reply.read())
        return stats

    def reset(self) -> None:
        request = urllib.request.Request(f"{self.root}/v1/stats/reset", data=b"", method="POST")
        with urllib.request.urlopen(request, timeout=5):
            pass

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=10)


def tasks_for(n: int, prefix: str) -> list[Task]:
    return [Task(id=f"{prefix}{i}", question=f"What is 6 times 7? (task {i})", gold="42") for i in range(n)]


async def run_level(server: Server, concurrency: int, tasks: int, tmp: Path) -> dict[str, Any]:
    log = DecisionLog(tmp / f"decisions-{concurrency}.jsonl")
    results = ResultsFile(tmp / f"results-{concurrency}.jsonl")
    graph = build_demo_graph(base_url=server.base_url, model_name="latency", log=log)
    config = BatchConfig(concurrency=concurrency, retries=1, breaker_k=None)
    try:
        # Warm-up, untimed: one task per slot, so the HTTP pool holds ``concurrency`` open connections
        # (a real batch runs for minutes: steady state is what counts), LangGraph's first compile paths,
        # and the backend learning that the server honours ``n``.
        warm = await run_batch(graph, tasks_for(concurrency, f"warm{concurrency}-"), results, config=config)
        assert all(line["status"] != "error" for line in warm.lines), warm.lines
        server.reset()
        cpu0, began = time.process_time(), time.perf_counter()
        outcome = await run_batch(graph, tasks_for(tasks, f"c{concurrency}-"), results, config=config)
        elapsed = time.perf_counter() - began
        cpu = time.process_time() - cpu0
    finally:
        results.close()
        log.close()
    stats = server.stats()
    statuses: dict[str, int] = {}
    for line in outcome.lines:
        statuses[str(line["status"])] = statuses.get(str(line["status"]), 0) + 1
    return {
        "concurrency": concurrency,
        "tasks": tasks,
        "elapsed_s": elapsed,
        "requests": stats["requests"],
        "max_in_flight": stats["max_in_flight"],
        "statuses": statuses,
        "client_cpu_ms_per_task": cpu * 1000.0 / tasks,
    }


def measure(latency_s: float, levels: list[int], waves: int) -> list[dict[str, Any]]:
    server = Server(latency_s)
    out = []
    try:
        with tempfile.TemporaryDirectory() as tmp:
            for concurrency in levels:
                row = asyncio.run(run_level(server, concurrency, concurrency * waves, Path(tmp)))
                calls = row["requests"] / row["tasks"]
                ideal = row["tasks"] * latency_s * calls / concurrency
                busy = latency_s * calls
                row.update(
                    latency_s=latency_s,
                    calls_per_task=calls,
                    ideal_s=ideal,
                    fraction=ideal / row["elapsed_s"],
                    wave_bound=busy / (busy + concurrency * row["client_cpu_ms_per_task"] / 1000.0),
                    tasks_per_s=row["tasks"] / row["elapsed_s"],
                    load_1m=os.getloadavg()[0],
                )
                out.append(row)
    finally:
        server.stop()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--latency", type=float, default=0.2, help="seconds per completion")
    parser.add_argument("--waves", type=int, default=6, help="tasks per level = concurrency x waves")
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 8, 64])
    parser.add_argument("--quick", action="store_true", help="short latency, few tasks: check that it runs")
    parser.add_argument("--json", action="store_true", help="print one JSON object on the last line")
    args = parser.parse_args()
    latency, waves = (0.05, 2) if args.quick else (args.latency, args.waves)
    rows = measure(latency, args.concurrency, waves)
    print(f"fixed latency {latency * 1000:.0f} ms per completion; {waves} waves of tasks per level")
    for row in rows:
        met = ""
        if row["concurrency"] == TARGET_AT:
            met = f" (target >= {TARGET:.0%}: {'met' if row['fraction'] >= TARGET else 'NOT met'})"
        print(
            f"concurrency {row['concurrency']:>3}: {row['tasks']:>4} tasks in {row['elapsed_s']:6.2f} s, "
            f"ideal {row['ideal_s']:6.2f} s -> {row['fraction']:6.1%} of ideal{met}; "
            f"{row['calls_per_task']:.2f} calls/task, {row['max_in_flight']} in flight at most, "
            f"client CPU {row['client_cpu_ms_per_task']:.1f} ms/task (wave bound {row['wave_bound']:.0%}), "
            f"load {row['load_1m']:.2f}, "
            f"{row['statuses']}"
        )
    if args.json:
        top = next((r for r in rows if r["concurrency"] == TARGET_AT), rows[-1])
        print(json.dumps({"latency_s": latency, "levels": rows, "target_met": top["fraction"] >= TARGET}))


if __name__ == "__main__":
    main()
