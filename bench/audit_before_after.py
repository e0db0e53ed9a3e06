"""The audit's time on the million-record log without per-token data, under two source trees, alternating.

    git archive BASE_COMMIT | tar -x -C /tmp/base
    .venv/bin/python bench/audit_before_after.py --before /tmp/base --after . [--records 1000000] [--rounds 3]

Lays the log down once (``bench/audit_million.py``'s writer: verdicts and summaries with no
``token_samples``), then, round after round, times in a fresh process of each tree ``analyse`` (the
full typed decode and fold that ``audit --html`` runs) and ``audit_summary`` (what ``retryctl audit
LOG`` runs: chain and summary, two processes), printing best and median wall seconds and the CPU
seconds of the best run for each tree. Alternating rounds share the machine's load between the trees.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

from audit_million import write_log  # bench/ is the script's directory

_CHILD = """
import json, resource, sys, time
from retryctl.report import analyse, audit_summary
path, what = sys.argv[1], sys.argv[2]
def cpu():
    r = resource.getrusage(resource.RUSAGE_SELF); c = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime + c.ru_utime + c.ru_stime
t0, c0 = time.perf_counter(), cpu()
if what == "analyse":
    analyse([path])
else:
    report, _ = audit_summary(path, min_bytes=0)
    assert report.ok
print(json.dumps({"wall": time.perf_counter() - t0, "cpu": cpu() - c0}))
"""


def _time(tree: str, path: str, what: str) -> dict[str, float]:
    env = {**os.environ, "PYTHONPATH": os.path.abspath(tree)}
    out = subprocess.run(
        [sys.executable, "-c", _CHILD, path, what], env=env, capture_output=True, text=True, check=True
    )
    figures: dict[str, float] = json.loads(out.stdout.strip().splitlines()[-1])
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", required=True, help="source tree before the change")
    parser.add_argument("--after", required=True, help="source tree after the change")
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--dir", default=None, help="where to put the temporary log")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        path = os.path.join(tmp, "million.jsonl")
        took = write_log(path, args.records)
        print(f"laid down {args.records} records ({os.path.getsize(path) / 1e6:.0f} MB) in {took:.1f} s")
        runs: dict[tuple[str, str], list[dict[str, float]]] = {}
        for r in range(args.rounds):
            for what in ("analyse", "audit_summary"):
                for name, tree in (("before", args.before), ("after", args.after)):
                    runs.setdefault((what, name), []).append(_time(tree, path, what))
            print(f"round {r + 1} of {args.rounds} done (load {os.getloadavg()[0]:.2f})")
        for (what, name), got in runs.items():
            walls = sorted(g["wall"] for g in got)
            best = min(got, key=lambda g: g["wall"])
            print(
                f"{what:13} {name:6}: best {walls[0]:.2f} s (CPU {best['cpu']:.2f} s), "
                f"median {statistics.median(walls):.2f} s, of {', '.join(f'{w:.2f}' for w in walls)}"
            )


if __name__ == "__main__":
    main()
