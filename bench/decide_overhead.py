"""Print the cost of one ``decide`` call (the pure decision core), median of many, in microseconds.

.venv/bin/python bench/decide_overhead.py [--calls 20000] [--json]
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import time

from retryctl.controller import Observation, Policy, Signal, Tally, decide


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--calls", type=int, default=20000)
    parser.add_argument("--json", action="store_true", help="also print one JSON object on the last line")
    args = parser.parse_args()
    policy = Policy()
    rule = policy.stopping_rule()
    tally = Tally.of(["12", "12", "13", "12"], [0.9, 0.8, 0.4, 0.95])
    obs = Observation(
        target="model-a",
        alternatives=("calculator", "python"),
        tally=tally,
        stop=rule(tally),
        signals=(Signal("token_confidence", 0.82),),
        budget_used={"samples": 4},
        budget_limit={"samples": 40},
        breakers={"calculator": "closed"},
    )
    batches = []
    per_batch = max(1, args.calls // 20)
    for _ in range(20):
        start = time.perf_counter()
        for _ in range(per_batch):
            decide(obs, policy)
        batches.append((time.perf_counter() - start) / per_batch)
    median_us = statistics.median(batches) * 1e6
    print(
        f"decide(): median {median_us:.1f} µs per call over {per_batch * 20} calls "
        f"(target ≤ 500 µs); verdict: {decide(obs, policy)}"
    )
    assert math.isfinite(median_us)
    if args.json:
        print(json.dumps({"median_us": median_us, "calls": per_batch * 20, "target_us": 500.0}))


if __name__ == "__main__":
    main()
