"""Time ``retryctl audit``'s work on a 1,000,000-record decision log: chain verification and analysis.

    .venv/bin/python bench/audit_million.py [--records 1000000] [--dir /tmp] [--cli] [--json]

The log is laid down with the writer's own line encoder (as ``bench/audit_verify.py`` does) over
verdict bodies validated by the record models: runs of 20 questions, each question a sequence of
verdicts (``switch``/``refine``/``retry`` then ``accept`` or ``stop``) with cumulative ledgers, and a
summary record with a gold answer per question. Printed separately, best of 3 each, wall and CPU
time and the load average (other work on the machine shows in the wall times): ``verify_log`` (the
chain), ``analyse`` (typed decode and fold), ``summarise`` (the sections), the plain analysis once
for reference (it must give the same summary), ``audit_log`` in one process (chain and fold in one
pass), then ``audit_summary`` in two processes (what the command does for a log over 64 MB when only
the summary is asked for: each process totals its own half's steps); ``--cli`` also times the whole
command in a fresh process, best of 3 (``retryctl audit LOG --json``, interpreter start-up and
imports included): that is the figure judged against the 3 s target.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import subprocess
import sys
import tempfile
import time

from retryctl.audit import verify_log
from retryctl.audit._canonical import GENESIS_HASH, encode_line
from retryctl.audit._records import SummaryBody, VerdictBody, summary_fields, verdict_fields
from retryctl.controller import Action, Evidence, Verdict
from retryctl.report import analyse, audit_log, audit_summary, summarise
from retryctl.report._analyse import analyse_plain

_PATTERNS = [
    ["accept"],
    ["accept"],
    ["switch", "accept"],
    ["refine", "accept"],
    ["retry", "accept"],
    ["switch", "refine", "stop"],
    ["refine", "refine", "ask_user"],
]


def _verdict_template(action: str) -> dict[str, object]:
    verdict = Verdict(
        action=Action(action),
        reason=f"confidence 0.87 < threshold 0.90 (agreement 0.80); {action}",
        confidence=0.87,
        answer="ekyo",
        evidence=Evidence(
            signals={"agreement": 0.8, "token_confidence": 0.87},
            weights={"agreement": 0.7, "token_confidence": 0.3},
            thresholds={"accept": 0.9, "max_refines": 2.0, "max_retries": 3.0},
            budget_used={"samples": 5, "usd": 0.0031, "attempts": 1},
            budget_limit={"samples": 40, "usd": 1.0, "attempts": None},
            breakers={"gpt-4o-mini": "closed", "calculator": "closed"},
            stopping={"stop": True, "confidence": 0.962, "rule": "ac-beta", "reason": "posterior"},
        ),
    )
    fields = verdict_fields(
        verdict,
        run_id="r",
        step_id="q",
        attempt=1,
        candidates_summary={"n": 5, "answers": ["ekyo"] * 5},
        latency_ms=812.5,
        extra={"target": "gpt-4o-mini"},
    )
    body = {"schema": 1, "ts": "2026-11-30T03:00:00.000000Z", **fields}
    return VerdictBody.model_validate(body).model_dump(mode="json", by_alias=True)


def _summary_template() -> dict[str, object]:
    fields = summary_fields(
        run_id="r",
        step_id="q",
        final_answer="ekyo",
        sampling_history=[5, 5],
        budget_used={"samples": 10, "usd": 0.006},
        budget_max={"samples": 40, "usd": 1.0},
        estimated_difficulty=0.3,
        extra={"gold": "ekyo"},
    )
    body = {"schema": 1, "ts": "2026-11-30T03:00:00.000000Z", **fields}
    return SummaryBody.model_validate(body).model_dump(mode="json", by_alias=True)


def write_log(path: str, n: int, *, seed: int = 0) -> float:
    """Lay down ``n`` chained records at ``path``; return the seconds it took."""
    rng = random.Random(seed)
    templates = {a: _verdict_template(a) for a in ("accept", "switch", "refine", "retry", "stop", "ask_user")}
    summary = _summary_template()
    head = GENESIS_HASH
    written = question = 0
    start = time.perf_counter()
    with open(path, "wb", buffering=1 << 20) as f:
        while written < n:
            run, step = f"run-{question // 20}", f"q{question % 20}"
            samples = 0.0
            for attempt, action in enumerate(rng.choice(_PATTERNS), start=1):
                if written >= n:
                    break
                samples += rng.choice((3, 5, 8))
                body = dict(templates[action])
                body.update(
                    run_id=run,
                    step_id=step,
                    attempt=attempt,
                    confidence=rng.random(),
                    budget={
                        "used": {"samples": samples, "usd": samples * 0.0006, "attempts": attempt},
                        "limit": {"samples": 40.0, "usd": 1.0, "attempts": None},
                    },
                    prev_hash=head,
                )
                line, head = encode_line(body)
                f.write(line)
                written += 1
            if written < n:
                body = dict(summary)
                body.update(run_id=run, step_id=step, gold=None, prev_hash=head)
                body.pop("gold")
                body["budget_used"] = {"samples": samples, "usd": samples * 0.0006}
                line, head = encode_line(body)
                f.write(line)
                written += 1
            question += 1
    return time.perf_counter() - start


def _best(fn: object, repeat: int = 3) -> tuple[float, list[float], float, object]:
    """Best wall time of ``repeat`` runs, all the wall times, the CPU time of the best run, the result."""
    times, cpus, result = [], [], None
    for _ in range(repeat):
        cpu = time.process_time()
        start = time.perf_counter()
        result = fn()  # type: ignore[operator]
        times.append(time.perf_counter() - start)
        cpus.append(time.process_time() - cpu)
    best = min(range(repeat), key=times.__getitem__)
    return times[best], times, cpus[best], result


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _load() -> str:
    return f"load {os.getloadavg()[0]:.2f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--dir", default=None, help="where to put the temporary log")
    parser.add_argument("--cli", action="store_true", help="also time the whole command in a new process")
    parser.add_argument("--json", action="store_true", help="end with one JSON line of the figures")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        path = os.path.join(tmp, "million.jsonl")
        setup = write_log(path, args.records)
        print(f"laid down {args.records} records ({os.path.getsize(path) / 1e6:.0f} MB) in {setup:.1f} s")

        def fmt(ts_: list[float]) -> str:
            return ", ".join(f"{t:.2f}" for t in ts_)

        print(f"verify_log ({_load()}) ...")
        best_v, tv, cpu_v, report = _best(lambda: verify_log(path))
        assert report.ok and report.records == args.records, report  # type: ignore[attr-defined]
        print(f"  verify_log:                {best_v:.2f} s, {cpu_v:.2f} CPU-s (best of 3: {fmt(tv)})")
        print(f"analyse ({_load()}) ...")
        best_a, ta, cpu_a, analysis = _best(lambda: analyse([path]))
        print(f"  analyse (typed decode + fold): {best_a:.2f} s, {cpu_a:.2f} CPU-s (best of 3: {fmt(ta)})")
        best_s, ts, cpu_s, summary = _best(lambda: summarise(analysis))  # type: ignore[arg-type]
        steps = len(analysis.steps)  # type: ignore[attr-defined]
        print(f"  summarise ({steps} steps):  {best_s:.2f} s, {cpu_s:.2f} CPU-s (best of 3: {fmt(ts)})")
        analysis = None  # free the heap: the worker is forked from this process
        print(f"plain path, once, for reference ({_load()}) ...")
        best_r, _, cpu_r, plain = _best(lambda: analyse_plain([path]), repeat=1)
        assert json.dumps(summarise(plain)) == json.dumps(summary), "the fast path must match"  # type: ignore[arg-type]
        plain = None
        print(f"  analyse_plain (orjson dicts + dict fold): {best_r:.2f} s, {cpu_r:.2f} CPU-s")
        print(f"one pass, chain and fold together ({_load()}) ...")
        best_o, to, cpu_o, _ = _best(lambda: audit_log(path, min_bytes=1 << 62))
        print(f"  audit_log, one process:   {best_o:.2f} s, {cpu_o:.2f} CPU-s (best of 3: {fmt(to)})")

        def command() -> None:
            report, got = audit_summary(path, min_bytes=0)
            assert report.ok
            assert json.dumps(got) == json.dumps(summary), "the two processes' summary must match"

        children = _children_cpu()
        best_p, tp, cpu_p, _ = _best(command)
        worker = (_children_cpu() - children) / 3
        verdict = "meets" if best_p <= 3.0 else "MISSES"
        print(
            f"  audit_summary, two processes (what the command does): {best_p:.2f} s "
            f"(best of 3: {fmt(tp)}; this process {cpu_p:.2f} CPU-s, worker {worker:.2f} CPU-s on average; "
            f"{verdict} the 3 s target; {_load()})"
        )
        figures: dict[str, object] = {
            "records": args.records,
            "verify_s": round(best_v, 3),
            "analyse_s": round(best_a, 3),
            "analyse_plain_s": round(best_r, 3),
            "summarise_s": round(best_s, 3),
            "one_pass_s": round(best_o, 3),
            "two_processes_s": round(best_p, 3),
        }
        if args.cli:
            cmd = [sys.executable, "-c", "from retryctl.cli import main; main()", "audit", path, "--json"]
            load = _load()
            children = _children_cpu()

            def cli() -> int:
                return subprocess.run(cmd, stdout=subprocess.DEVNULL, check=False).returncode

            took, tc, _, code = _best(cli)
            cpu = (_children_cpu() - children) / 3
            print(
                f"retryctl audit LOG --json (new process, exit {code}): {took:.2f} s "
                f"(best of 3: {fmt(tc)}), {cpu:.2f} CPU-s in both processes on average "
                f"({load} before, {_load()} after)"
            )
            figures["cli_s"] = round(took, 3)
            figures["cli_cpu_s"] = round(cpu, 3)
            figures["cli_exit"] = code
        figures["load"] = round(os.getloadavg()[0], 2)
        if args.json:
            print(json.dumps(figures))


if __name__ == "__main__":
    main()
