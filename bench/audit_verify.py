"""Time ``verify_log`` on a large decision log, and ``DecisionLog`` appends on a small one.

    .venv/bin/python bench/audit_verify.py [--records 1000000] [--writes 2000] [--dir /tmp]

The large log is laid down with the writer's own line encoder (``encode_line``) over realistic
verdict and summary bodies validated by the record models, so it is byte-for-byte what
``DecisionLog`` writes, without paying a lock and a system call per record just to set up the
benchmark. The write figure is measured separately through the real ``DecisionLog``.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time

from retryctl.audit import DecisionLog, verify_log
from retryctl.audit._canonical import GENESIS_HASH, encode_line
from retryctl.audit._records import VerdictBody, verdict_fields
from retryctl.controller import Action, Evidence, Verdict

_VERDICT = Verdict(
    action=Action.ACCEPT,
    reason="4 of 5 samples agree on 'ekyo' (posterior 0.962 >= 0.95)",
    confidence=0.91,
    answer="ekyo",
    evidence=Evidence(
        signals={"agreement": 0.8, "token_confidence": 0.87, "verifier": 0.9},
        weights={"agreement": 0.5, "token_confidence": 0.25, "verifier": 0.25},
        thresholds={"confidence": 0.9, "agreement": 0.8},
        budget_used={"samples": 5, "usd": 0.0031, "attempts": 1},
        budget_limit={"samples": 40, "usd": 1.0, "attempts": None},
        breakers={"gpt-3.5-turbo": "closed", "calculator": "closed"},
        stopping={"stop": True, "confidence": 0.962, "rule": "ac-beta", "reason": "posterior"},
        notes=[],
    ),
)


def _write_bulk(path: str, n: int, *, extra: dict[str, object] | None = None) -> float:
    template = VerdictBody.model_validate(
        {
            "schema": 1,
            "ts": "2026-11-30T03:00:00.000000Z",
            **verdict_fields(
                _VERDICT,
                run_id="run-0",
                step_id="q0",
                attempt=1,
                candidates_summary={"ekyo": 4, "ekoy": 1},
                latency_ms=812.5,
                extra=extra,
            ),
        }
    ).model_dump(mode="json", by_alias=True)
    head = GENESIS_HASH
    start = time.perf_counter()
    with open(path, "wb", buffering=1 << 20) as f:
        for i in range(n):
            body = dict(template)
            body["run_id"] = f"run-{i // 1000}"
            body["step_id"] = f"q{i % 1000}"
            body["confidence"] = (i % 997) / 997
            body["prev_hash"] = head
            line, head = encode_line(body)
            f.write(line)
    return time.perf_counter() - start


def _time_decision_log(path: str, n: int, *, fsync: bool) -> float:
    start = time.perf_counter()
    with DecisionLog(path, fsync=fsync) as log:
        for i in range(n):
            log.record_verdict(
                _VERDICT,
                run_id="bench",
                step_id=f"q{i}",
                attempt=1,
                candidates_summary={"ekyo": 4, "ekoy": 1},
                latency_ms=812.5,
            )
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--writes", type=int, default=2000)
    parser.add_argument(
        "--slow",
        type=int,
        default=20_000,
        help="records for the slow-path figure (lines that must be parsed)",
    )
    parser.add_argument("--dir", default=None, help="where to put the temporary logs")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        big = os.path.join(tmp, "big.jsonl")
        setup = _write_bulk(big, args.records)
        size_mb = os.path.getsize(big) / 1e6
        print(f"laid down {args.records} records ({size_mb:.0f} MB) in {setup:.1f} s")
        times = []
        for _ in range(3):
            start = time.perf_counter()
            report = verify_log(big)
            times.append(time.perf_counter() - start)
            assert report.ok and report.records == args.records, report
        best = min(times)
        print(
            f"verify_log: {args.records} records in {best:.2f} s (best of 3: "
            f"{', '.join(f'{t:.2f}' for t in times)}), {args.records / best / 1e6:.2f} M records/s, "
            f"{size_mb / best:.0f} MB/s"
        )
        # A nested key named like a chain key makes the writer use the sorted layout, which the
        # verifier must parse: the worst case, e.g. a log re-serialised by another tool.
        slow = os.path.join(tmp, "slow.jsonl")
        _write_bulk(slow, args.slow, extra={"run_id": "parent-run"})
        start = time.perf_counter()
        report = verify_log(slow)
        took = time.perf_counter() - start
        assert report.ok and report.records == args.slow, report
        print(
            f"verify_log, parsed path: {args.slow} records in {took:.2f} s, "
            f"{took / args.slow * 1e6:.1f} us/record"
        )
        for fsync in (False, True):
            n = args.writes if not fsync else max(1, args.writes // 10)
            small = os.path.join(tmp, f"small-{fsync}.jsonl")
            took = _time_decision_log(small, n, fsync=fsync)
            assert verify_log(small).ok
            print(
                f"DecisionLog.record_verdict (fsync={fsync}): {n} records in {took:.2f} s, "
                f"{took / n * 1e6:.0f} us/record"
            )


if __name__ == "__main__":
    main()
