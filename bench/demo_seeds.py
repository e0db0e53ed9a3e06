"""The demo's built-in questions over many seeds: how each ends (never accepted wrong is the bar).

    python bench/demo_seeds.py --seeds 12            # every built-in question, seeds 0..11
    python bench/demo_seeds.py --seeds 12 --question "..." --gold 51

Prints one line per run (status, answer, the member that served it, the verdicts' actions) and, per
question, the counts of accepted right, accepted wrong and abstentions.
"""

from __future__ import annotations

import argparse
import time
from collections import Counter

from langchain_core.messages import HumanMessage
from langchain_core.runnables import RunnableConfig

from retryctl.agent import build_demo_graph, demo_schedule
from retryctl.agent._graph import demo_policy
from retryctl.agent._questions import DEMO_QUESTIONS
from retryctl.models import EmbeddedBackend


def main() -> None:
    """Run the built-in questions (or one) over ``--seeds`` seeds and print how each run ended."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", type=int, default=12)
    ap.add_argument("--first-seed", type=int, default=0)
    ap.add_argument("--question")
    ap.add_argument("--gold")
    ap.add_argument("--calibration", choices=["shipped", "none"], default="shipped")
    args = ap.parse_args()
    asked = [(args.question, args.gold)] if args.question else [(q.question, q.gold) for q in DEMO_QUESTIONS]
    model = EmbeddedBackend(n_ctx=1536)
    policy = demo_policy("shipped" if args.calibration == "shipped" else None)
    for question, gold in asked:
        ends: Counter[str] = Counter()
        for seed in range(args.first_seed, args.first_seed + args.seeds):
            graph = build_demo_graph(model=model, policy=policy, schedule=demo_schedule(seed))
            started = time.monotonic()
            config: RunnableConfig = {"configurable": {"run_id": f"s{seed}"}}
            state = graph.invoke({"messages": [HumanMessage(question)]}, config)
            result = state["result"]
            actions = [f"{v['target']}:{v['verdict']['action']}" for v in state.get("verdicts", [])]
            accepted = result["status"] == "accepted"
            end = "abstained" if not accepted else ("right" if result["answer"] == gold else "WRONG")
            ends[end] += 1
            print(
                f"seed {seed}: {end} {result['answer']} by {result['served_by']} "
                f"{' '.join(actions)} ({time.monotonic() - started:.0f}s)",
                flush=True,
            )
        print(f"{question!r} gold {gold}: {dict(ends)}", flush=True)


if __name__ == "__main__":
    main()
