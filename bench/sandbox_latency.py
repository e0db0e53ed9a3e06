"""Median latency of ``print(1+1)`` in the sandbox, per tier: a cold ``run_code`` and a warm pool.

Targets on the project's 2-core machines: cold <= 15 ms, warm <= 3 ms. Run:
``.venv/bin/python bench/sandbox_latency.py [--cold N] [--warm N] [--json]``. The machine's load average is
printed too: the figures are wall-clock times and move with whatever else the cores are doing.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import time

from retryctl.sandbox import Sandbox, Tier, probe_tiers, run_code
from retryctl.sandbox._launch import root_layout

CODE = "print(1+1)"


def _timed(fn: object, n: int) -> list[float]:
    assert callable(fn)
    times = []
    for _ in range(n):
        start = time.perf_counter()
        result = fn()
        times.append((time.perf_counter() - start) * 1000)
        assert result.stdout == "2\n", result
    return times


def _floor(argv: list[str], n: int) -> list[float]:
    times = []
    for _ in range(n):
        start = time.perf_counter()
        subprocess.run(argv, check=True)
        times.append((time.perf_counter() - start) * 1000)
    return times


def _line(label: str, times: list[float], target: float) -> str:
    median = statistics.median(times)
    verdict = "ok" if median <= target else "over target"
    return (
        f"{label:<28} median {median:6.2f} ms  p10 {statistics.quantiles(times, n=10)[0]:6.2f}  "
        f"min {min(times):6.2f}  (n={len(times)}, target <= {target:g} ms: {verdict})"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--cold", type=int, default=40, help="cold runs per tier")
    parser.add_argument("--warm", type=int, default=300, help="warm-pool runs per tier")
    parser.add_argument("--json", action="store_true", help="also print one JSON object on the last line")
    args = parser.parse_args()
    report = probe_tiers()
    figures: dict[str, dict[str, float]] = {}
    print(f"load average before: {os.getloadavg()[0]:.2f}; uid {os.geteuid()}")
    # The floor under any cold run: starting the sandbox's interpreter at all (and inside bwrap).
    floor = _floor(["/usr/bin/python3", "-I", "-S", "-c", "pass"], args.cold)
    print(_line("floor: python3 -c pass", floor, 15))
    if report.status(Tier.BUBBLEWRAP).available:
        bwrap = ["bwrap", "--unshare-all", "--die-with-parent", "--ro-bind", "/usr", "/usr",
                 *root_layout()[3:], "/usr/bin/python3", "-I", "-S", "-c", "pass"]  # fmt: skip
        print(_line("floor: bwrap python3 -c pass", _floor(bwrap, args.cold), 15))
    for status in report.tiers:
        if status.tier is Tier.UNSAFE:
            continue
        if not status.available:
            print(f"{status.tier.value}: skipped ({status.reason})")
            continue
        tier = status.tier
        run_code(CODE, tier=tier)  # warm the page cache and the probe
        cold = _timed(lambda tier=tier: run_code(CODE, tier=tier), args.cold)
        print(_line(f"{tier.value} cold run_code", cold, 15))
        figures[tier.value] = {"cold_ms": statistics.median(cold)}
        with Sandbox(tier=tier) as sandbox:
            _timed(lambda: sandbox.run(CODE), 10)
            warm = _timed(lambda: sandbox.run(CODE), args.warm)
        print(_line(f"{tier.value} warm Sandbox.run", warm, 3))
        figures[tier.value]["warm_ms"] = statistics.median(warm)
    print(f"load average after: {os.getloadavg()[0]:.2f}")
    if args.json:
        targets = {"cold_ms": 15.0, "warm_ms": 3.0}
        print(json.dumps({"tiers": figures, "targets": targets, "load_1m": os.getloadavg()[0]}))


if __name__ == "__main__":
    main()
