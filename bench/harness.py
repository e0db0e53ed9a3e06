"""Run every benchmark, each in its own process, and print one table: figure, value, target, met?

    .venv/bin/python bench/harness.py [--bank PATH] [--only NAME,...] [--quick] [--json] [--verbose]

Each benchmark script runs in a fresh interpreter (its imports, caches and threads cannot colour the next
one) with ``--json``, and its last stdout line is read as one JSON object. A benchmark that fails, times
out, prints no JSON, or cannot run here (no shared bank, no embedded model) becomes a row saying so; the
others still run. Figures are ratios or medians measured within one run of one script; the machine's
1-minute load average when each script started is printed beside its rows, since on shared 2-core
machines wall-clock figures move with whatever else the cores are doing. The exit code is 1 when a
benchmark could not produce its figures, 0 otherwise (a missed target is printed, not an error).
``--quick`` runs each script
with tiny sizes (to check the harness, not to measure). ``--json`` prints the table's rows as one JSON
object on the last line instead of the table.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
DEFAULT_BANK = HERE.parent.parent / "shared" / "banks" / "last_letters_gpt35.jsonl"

Row = dict[str, Any]


def row(figure: str, value: str, target: str = "—", met: bool | None = None, *, error: bool = False) -> Row:
    return {"figure": figure, "value": value, "target": target, "met": met, "error": error}


def _stopping(data: dict[str, Any]) -> list[Row]:
    bank = Path(str(data["bank"])).name
    head = f"stopping policies on {bank} ({data['questions']} q x {data['orders']} orders)"
    rows = [row(head, f"{float(data['seconds']):.1f} s for {len(data['policies'])} policies")]
    for p in data["policies"]:
        value = f"{float(p['accuracy']):.2f} % at {float(p['avg_samples']):.2f} samples"
        rows.append(row(f"  {p['policy']}: accuracy at average samples", value))
    return rows


def _controller(data: dict[str, Any]) -> list[Row]:
    return [
        row("plain ToolNode, no-op tool, per step", f"{data['plain_step_ms']:.3f} ms"),
        row("ControlledToolNode + DecisionLog, per step", f"{data['controlled_step_ms']:.3f} ms"),
        row(
            "  the same without a DecisionLog, per step",
            f"{data['unlogged_step_ms']:.3f} ms ({data['ratio_unlogged']:.3f}x plain)",
        ),
        row(
            "controller overhead: controlled / plain",
            f"{data['ratio']:.3f}x",
            "<= 1.10x",
            data["ratio"] <= 1.10,
        ),
        row(
            "controller overhead per decision",
            f"{data['per_decision_ms']:.3f} ms",
            "<= 0.5 ms",
            data["per_decision_ms"] <= 0.5,
        ),
    ]


def _middleware(data: dict[str, Any]) -> list[Row]:
    return [
        row("bare create_agent, scripted model + no-op tool, per run", f"{data['bare_step_ms']:.3f} ms"),
        row("create_agent + RetryController + DecisionLog, per run", f"{data['controlled_step_ms']:.3f} ms"),
        row(
            "  the same without a DecisionLog, per run",
            f"{data['unlogged_step_ms']:.3f} ms ({data['ratio_unlogged']:.3f}x bare)",
        ),
        row(
            "  pass-through writing one record per call (the floor), per run",
            f"{data['floor_step_ms']:.3f} ms ({data['ratio_floor']:.3f}x bare)",
        ),
        row(
            "middleware overhead: controlled / bare",
            f"{data['ratio']:.3f}x",
            "<= 1.10x",
            data["ratio"] <= 1.10,
        ),
        row(
            "middleware overhead per decision",
            f"{data['per_decision_ms']:.3f} ms",
            "<= 0.5 ms",
            data["per_decision_ms"] <= 0.5,
        ),
    ]


def _decide(data: dict[str, Any]) -> list[Row]:
    median, target = float(data["median_us"]), float(data["target_us"])
    return [row("one decide() call, median", f"{median:.1f} µs", f"<= {target:.0f} µs", median <= target)]


def _batch(data: dict[str, Any]) -> list[Row]:
    rows = []
    latency_ms = float(data["latency_s"]) * 1000
    for level in data["levels"]:
        c = int(level["concurrency"])
        value = (
            f"{level['fraction']:.1%} ({level['tasks']} tasks in {level['elapsed_s']:.2f} s, ideal "
            f"{level['ideal_s']:.2f} s; client CPU {level['client_cpu_ms_per_task']:.1f} ms/task, "
            f"wave bound {level['wave_bound']:.0%})"
        )
        target, met = (">= 90 %", bool(level["fraction"] >= 0.9)) if c == 64 else ("—", None)
        figure = f"batch throughput, {latency_ms:.0f} ms server, concurrency {c}: of ideal"
        rows.append(row(figure, value, target, met))
    return rows


def _gateway(data: dict[str, Any]) -> list[Row]:
    rows = []
    latency_ms = float(data["latency_s"]) * 1000
    for level in data["levels"]:
        c, d, g = int(level["concurrency"]), level["direct"], level["gateway"]
        ratio, added = float(level["ratio"]), float(level["added_p50_ms"])
        target, met = (">= 95 %", ratio >= 0.95) if c == 64 else ("—", None)
        rows.append(
            row(
                f"gateway, {latency_ms:.0f} ms upstream, concurrency {c}: throughput of direct",
                f"{ratio:.1%} ({g['rps']:.1f} vs {d['rps']:.1f} req/s)",
                target,
                met,
            )
        )
        rows.append(
            row(
                f"  concurrency {c}: added p50 latency",
                f"{added:+.2f} ms (gateway CPU {g['gateway_cpu_ms_per_request']:.2f} ms/request)",
                "<= 2 ms",
                added <= 2.0,
            )
        )
    a = data["adaptive"]
    rows.append(
        row(
            f"gateway adaptive (max_samples {a['max_samples']}): samples per request",
            f"{a['samples_per_request']:.2f} (direct SC-{a['sc_samples_per_request']}: "
            f"{a['sc_samples_per_request']}; upstream counted {a['upstream_choices_per_request']:.2f})",
        )
    )
    rows.append(
        row(
            "  adaptive p50 beyond its upstream calls",
            f"{a['added_p50_ms']:+.1f} ms over {a['upstream_calls_per_request']:.2f} calls "
            f"x {latency_ms:.0f} ms",
        )
    )
    return rows


def _audit(data: dict[str, Any]) -> list[Row]:
    records = int(data["records"])
    return [
        row(f"audit: verify_log, {records:,} records", f"{float(data['verify_s']):.2f} s"),
        row(
            f"audit: `retryctl audit LOG --json`, {records:,} records, new process",
            f"{float(data['cli_s']):.2f} s",
            "<= 3 s",
            float(data["cli_s"]) <= 3.0,
        ),
    ]


def _sandbox(data: dict[str, Any]) -> list[Row]:
    rows = []
    targets = data["targets"]
    for tier, figs in data["tiers"].items():
        for key, label in (("cold_ms", "cold run_code"), ("warm_ms", "warm Sandbox.run")):
            if key in figs:
                value, target = float(figs[key]), float(targets[key])
                rows.append(
                    row(
                        f"sandbox {tier}: {label} print(1+1), median",
                        f"{value:.2f} ms",
                        f"<= {target:g} ms",
                        value <= target,
                    )
                )
    if not rows:
        rows.append(row("sandbox", "no isolating tier available here"))
    return rows


def _embedded(data: dict[str, Any]) -> list[Row]:
    ratio = float(data["ratio"])
    return [
        row("embedded SmolLM2: EmbeddedBackend with logprobs", f"{data['backend_tps']:.1f} tokens/s"),
        row("embedded SmolLM2: raw llama-cpp-python, no logprobs", f"{data['raw_tps']:.1f} tokens/s"),
        row("embedded: backend / raw tokens/s", f"{ratio:.1%}", ">= 90 %", ratio >= 0.9),
    ]


def _has_module(name: str) -> str | None:
    return None if importlib.util.find_spec(name) is not None else f"{name} is not installed"


@dataclass
class Bench:
    """One benchmark script: how to run it (full and quick) and how its JSON becomes rows."""

    name: str
    script: str
    args: list[str]
    quick: list[str]
    rows: Callable[[dict[str, Any]], list[Row]]
    timeout_s: float
    skip: Callable[[argparse.Namespace], str | None] = field(default=lambda _args: None)


def benches(bank: Path) -> list[Bench]:
    return [
        Bench(
            "stopping_policies",
            "stopping_policies.py",
            ["--bank", str(bank), "--json"],
            ["--orders", "1"],
            _stopping,
            600,
            skip=lambda _a: None if bank.exists() else f"shared bank not found at {bank}",
        ),
        Bench("controller_overhead", "controller_overhead.py", ["--json"], ["--quick"], _controller, 600),
        Bench("middleware_overhead", "middleware_overhead.py", ["--json"], ["--quick"], _middleware, 600),
        Bench("decide_overhead", "decide_overhead.py", ["--json"], ["--calls", "400"], _decide, 300),
        Bench("batch_throughput", "batch_throughput.py", ["--json"], ["--quick"], _batch, 900),
        Bench("gateway_throughput", "gateway_throughput.py", ["--json"], ["--quick"], _gateway, 600),
        Bench("audit_million", "audit_million.py", ["--cli", "--json"], ["--records", "20000"], _audit, 1800),
        Bench(
            "sandbox_latency", "sandbox_latency.py", ["--json"], ["--cold", "3", "--warm", "5"], _sandbox, 600
        ),
        Bench(
            "embedded_tokens",
            "embedded_tokens.py",
            ["--json"],
            ["--tokens", "8", "--runs", "1"],
            _embedded,
            900,
            skip=lambda _a: _has_module("llama_cpp"),
        ),
    ]


def last_json(stdout: str) -> dict[str, Any] | None:
    for raw in reversed(stdout.strip().splitlines()):
        line = raw.strip()
        if line.startswith("{"):
            try:
                parsed = json.loads(line)
            except ValueError:
                return None
            return parsed if isinstance(parsed, dict) else None
        if line:
            return None
    return None


def run_one(bench: Bench, *, quick: bool, verbose: bool) -> tuple[list[Row], dict[str, Any]]:
    """Run one script; return its rows (or one row saying why there are none) and a raw record."""
    load = os.getloadavg()[0]
    argv = [sys.executable, str(HERE / bench.script), *bench.args, *(bench.quick if quick else [])]
    began = time.perf_counter()
    record: dict[str, Any] = {"name": bench.name, "argv": argv[1:], "load_1m": load}
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=bench.timeout_s, check=False)
    except subprocess.TimeoutExpired:
        record.update(status="timeout", seconds=bench.timeout_s)
        return [row(bench.name, f"timed out after {bench.timeout_s:.0f} s", error=True)], record
    record["seconds"] = time.perf_counter() - began
    if verbose:
        sys.stderr.write(f"--- {bench.name} (exit {done.returncode})\n{done.stdout}{done.stderr}")
    data = last_json(done.stdout) if done.returncode == 0 else None
    if data is None:
        tail = (done.stderr.strip().splitlines() or done.stdout.strip().splitlines() or ["no output"])[-1]
        why = f"exit {done.returncode}" if done.returncode else "no JSON on its last line"
        record.update(status="failed", error=f"{why}: {tail[:200]}")
        return [row(bench.name, f"failed ({why}: {tail[:120]})", error=True)], record
    record.update(status="ok", result=data)
    try:
        rows = bench.rows(data)
    except (KeyError, TypeError, ValueError) as exc:
        record.update(status="failed", error=f"unexpected JSON: {exc!r}")
        return [row(bench.name, f"failed (unexpected JSON: {exc!r})", error=True)], record
    return rows, record


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bank", type=Path, default=DEFAULT_BANK, help="the shared sample bank")
    parser.add_argument("--only", default="", help="comma-separated benchmark names (default: all)")
    parser.add_argument("--quick", action="store_true", help="tiny sizes: check that everything runs")
    parser.add_argument("--json", action="store_true", help="print the rows as JSON on the last line")
    parser.add_argument("--verbose", action="store_true", help="echo each script's own output to stderr")
    args = parser.parse_args()
    chosen = benches(args.bank)
    names = [n.strip() for n in args.only.split(",") if n.strip()]
    unknown = sorted(set(names) - {b.name for b in chosen})
    if unknown:
        parser.error(f"unknown benchmark(s) {', '.join(unknown)}; known: {', '.join(b.name for b in chosen)}")
    if names:
        chosen = [b for b in chosen if b.name in names]

    all_rows: list[Row] = []
    records: list[dict[str, Any]] = []
    load_start = os.getloadavg()
    for bench in chosen:
        reason = bench.skip(args)
        if reason is not None:
            rows, record = [row(bench.name, f"skipped: {reason}")], {"name": bench.name, "status": "skipped"}
        else:
            if not args.json:
                print(f"running {bench.name} ...", file=sys.stderr, flush=True)
            rows, record = run_one(bench, quick=args.quick, verbose=args.verbose)
        load = record.get("load_1m")
        for r in rows:
            r.update(bench=bench.name, load_1m=load)
        all_rows.extend(rows)
        records.append(record)
    load_end = os.getloadavg()

    if args.json:
        print(json.dumps({"load_start": load_start, "load_end": load_end, "rows": all_rows, "runs": records}))
    else:
        print_table(all_rows, load_start, load_end, quick=args.quick)
    # A missed target is a figure to read, not a failure (timings move with the machine's load); a
    # benchmark that could not produce its figures is one.
    return 1 if any(r["error"] for r in all_rows) else 0


def print_table(
    rows: list[Row], load_start: tuple[float, ...], load_end: tuple[float, ...], *, quick: bool
) -> None:
    from rich.console import Console
    from rich.table import Table

    loads = "/".join(f"{x:.2f}" for x in load_start), "/".join(f"{x:.2f}" for x in load_end)
    title = (
        f"retryctl benchmarks{' (QUICK: sizes too small to measure)' if quick else ''}; "
        f"load average 1/5/15 min: {loads[0]} at start, {loads[1]} at end; {os.cpu_count()} cores"
    )
    table = Table(title=title, title_justify="left")
    for name, justify in (("figure", "left"), ("value", "right"), ("target", "right"), ("met?", "center")):
        table.add_column(name, justify=justify)  # type: ignore[arg-type]
    table.add_column("load", justify="right")
    for r in rows:
        met = "ERROR" if r["error"] else {True: "yes", False: "NO", None: "—"}[r["met"]]
        load = "" if r.get("load_1m") is None else f"{r['load_1m']:.2f}"
        table.add_row(r["figure"], r["value"], r["target"], met, load)
    Console(width=200).print(table)


if __name__ == "__main__":
    sys.exit(main())
