"""Time ``retryctl audit``'s work on a 1,000,000-record decision log: chain verification and analysis.

    .venv/bin/python bench/audit_million.py [--records 1000000] [--dir /tmp] [--cli] [--json]

The log is laid down with the writer's own line encoder (as ``bench/audit_verify.py`` does) over
verdict bodies validated by the record models: runs of 20 questions, each question a sequence of
verdicts (``switch``/``refine``/``retry`` then ``accept`` or ``stop``) with cumulative ledgers, and a
summary record with a gold answer per question. Printed separately: ``verify_log`` (the chain),
``analyse`` (the one-pass fold) and ``summarise`` (the sections), best of 3 each, then all three with
verification in a worker process alongside the analysis (what the command does); ``--cli`` also
times the whole command in a fresh process (``retryctl audit LOG --json``, interpreter start-up and
imports included).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time

from retryctl.audit import verify_log
from retryctl.audit._canonical import GENESIS_HASH, encode_line
from retryctl.audit._records import SummaryBody, VerdictBody, summary_fields, verdict_fields
from retryctl.controller import Action, Evidence, Verdict
from retryctl.report import analyse, start_verification, summarise

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


def _best(fn: object, repeat: int = 3) -> tuple[float, list[float], object]:
    times, result = [], None
    for _ in range(repeat):
        start = time.perf_counter()
        result = fn()  # type: ignore[operator]
        times.append(time.perf_counter() - start)
    return min(times), times, result


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

        best_v, tv, report = _best(lambda: verify_log(path))
        assert report.ok and report.records == args.records, report  # type: ignore[attr-defined]
        best_a, ta, analysis = _best(lambda: analyse([path]))
        best_s, ts, _ = _best(lambda: summarise(analysis))  # type: ignore[arg-type]
        steps = len(analysis.steps)  # type: ignore[attr-defined]

        def fmt(ts_: list[float]) -> str:
            return ", ".join(f"{t:.2f}" for t in ts_)

        print(f"verify_log:  {best_v:.2f} s (best of 3: {fmt(tv)})")
        print(f"analyse:     {best_a:.2f} s (best of 3: {fmt(ta)}), {steps} steps")
        print(f"summarise:   {best_s:.2f} s (best of 3: {fmt(ts)})")
        total = best_v + best_a + best_s
        verdict = "meets" if total <= 3.0 else "MISSES"
        print(f"verify + analysis, one after the other: {total:.2f} s ({verdict} the 3 s target)")

        analysis = None  # free the heap: the worker is forked from this process

        def side_by_side() -> None:
            pending = start_verification([path])
            summarise(analyse([path]))
            assert pending()[0].ok

        best_p, tp, _ = _best(side_by_side)
        figures: dict[str, object] = {
            "records": args.records,
            "verify_s": round(best_v, 3),
            "analyse_s": round(best_a, 3),
            "summarise_s": round(best_s, 3),
            "side_by_side_s": round(best_p, 3),
        }
        verdict = "meets" if best_p <= 3.0 else "MISSES"
        print(
            f"verify in a worker process while analysing (as the command does): {best_p:.2f} s "
            f"(best of 3: {fmt(tp)}; {verdict} the 3 s target)"
        )
        if args.cli:
            cmd = [sys.executable, "-c", "from retryctl.cli import main; main()", "audit", path, "--json"]
            start = time.perf_counter()
            done = subprocess.run(cmd, stdout=subprocess.DEVNULL, check=False)
            took = time.perf_counter() - start
            print(f"retryctl audit LOG --json (new process, exit {done.returncode}): {took:.2f} s")
            figures["cli_s"] = round(took, 3)
            figures["cli_exit"] = done.returncode
        if args.json:
            print(json.dumps(figures))


if __name__ == "__main__":
    main()
