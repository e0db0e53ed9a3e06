"""Controller overhead per step: a LangGraph graph with ``ControlledToolNode`` against the same graph with
a plain ``langgraph.prebuilt.ToolNode``, both on a no-op tool.

    .venv/bin/python bench/controller_overhead.py [--steps 400] [--rounds 7] [--quick] [--json]

A step is one ``graph.invoke`` of ``START -> tools -> END`` over a fresh AI message carrying one tool
call, so each step pays what a real agent step pays: LangGraph's Pregel loop, ToolNode's parsing and
executor, the tool's own callbacks, and (controlled) one verdict written to a real ``DecisionLog`` in a
temporary file; a third graph runs the controlled node without a log, to show what the durable record
costs. ``ControlledToolNode`` runs its calls exactly where ``ToolNode`` runs them (it overrides none of
ToolNode's private methods: the control is ToolNode's public ``wrap_tool_call`` hook), so the overhead
per decision is the controlled step's time less the plain step's. Rounds rotate the graphs so machine
load hits all alike; each round's figure is the median step time, and the best round of each is
reported (best-of-N medians), with the median of the rounds' own ratios as a second view.
Target: controlled / plain <= 1.10 and <= 0.5 ms of overhead per decision. With ``--profile N`` the
controlled graph is also run N times under cProfile, ToolNode's worker threads included, and the top
functions by own time and retryctl's by cumulative time are printed (``bench/_overhead.py``, shared
with ``middleware_overhead.py``).
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from _overhead import paired_ratio, profile_threads, rotated_rounds  # bench/ is the script's directory
from langchain_core.messages import AIMessage
from langchain_core.tools import tool
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode

from retryctl.audit import DecisionLog, verify_log
from retryctl.nodes import ControlledToolNode

RATIO_TARGET = 1.10
PER_DECISION_TARGET_MS = 0.5


@tool
def noop() -> str:
    """Do nothing and say so."""
    return "ok"


def build(node: ToolNode) -> Any:
    graph = StateGraph(MessagesState)
    graph.add_node("tools", node)
    graph.add_edge(START, "tools")
    graph.add_edge("tools", END)
    return graph.compile()


def step_input(i: int) -> dict[str, Any]:
    call = {"name": "noop", "args": {}, "id": f"call-{i}", "type": "tool_call"}
    return {"messages": [AIMessage(content="", tool_calls=[call])]}


def round_median(graph: Any, steps: int, start: int) -> float:
    """Median seconds per step over ``steps`` invocations (inputs built outside the timed region)."""
    inputs = [step_input(start + i) for i in range(steps)]
    times = []
    for payload in inputs:
        began = time.perf_counter()
        out = graph.invoke(payload)
        times.append(time.perf_counter() - began)
    assert out["messages"][-1].content == "ok", out
    return statistics.median(times)


def measure(steps: int, rounds: int, log_path: Path, *, prof: int = 0) -> dict[str, Any]:
    plain = build(ToolNode([noop]))
    log = DecisionLog(log_path)
    node = ControlledToolNode([noop], log=log)
    controlled = build(node)
    # The same node without a decision log: how much of the overhead is the durable record.
    unlogged = build(ControlledToolNode([noop]))
    graphs: dict[str, Callable[..., Any]] = {"plain": plain, "controlled": controlled, "unlogged": unlogged}
    # Warm-up: imports, pydantic schema caches, the log file's first open.
    for graph in graphs.values():
        round_median(graph, max(20, steps // 10), 0)
    starts = itertools.count(1_000_000, steps)  # every step of every round has its own call id

    def subject(graph: Any) -> Callable[[], float]:
        return lambda: round_median(graph, steps, next(starts))

    runs = rotated_rounds({name: subject(graph) for name, graph in graphs.items()}, rounds)
    if prof:
        inputs = [step_input(10_000_000 + i) for i in range(prof)]
        profile_threads(
            lambda: [controlled.invoke(payload) for payload in inputs],
            label=f"{prof} controlled steps",
            top=30,
        )
    log.close()
    report = verify_log(log_path)
    assert report.ok, report
    decisions_per_step = report.records / (rounds * steps + max(20, steps // 10) + prof)
    best_plain, best_ctl = min(runs["plain"]), min(runs["controlled"])
    best_unlogged = min(runs["unlogged"])
    ratio = best_ctl / best_plain
    per_decision_ms = (best_ctl - best_plain) * 1000.0 / decisions_per_step
    return {
        "steps_per_round": steps,
        "rounds": rounds,
        "plain_step_ms": best_plain * 1000.0,
        "controlled_step_ms": best_ctl * 1000.0,
        "plain_rounds_ms": [t * 1000.0 for t in runs["plain"]],
        "controlled_rounds_ms": [t * 1000.0 for t in runs["controlled"]],
        "unlogged_step_ms": best_unlogged * 1000.0,
        "ratio": ratio,
        "ratio_unlogged": best_unlogged / best_plain,
        "ratio_paired": paired_ratio(runs, "controlled", "plain"),
        "decisions_per_step": decisions_per_step,
        "per_decision_ms": per_decision_ms,
        "log_records": report.records,
        "ratio_met": ratio <= RATIO_TARGET,
        "per_decision_met": per_decision_ms <= PER_DECISION_TARGET_MS,
        "load_1m": os.getloadavg()[0],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=400, help="invocations per round")
    parser.add_argument("--rounds", type=int, default=7, help="rounds per graph (best median is kept)")
    parser.add_argument("--quick", action="store_true", help="a few steps: check that it runs")
    parser.add_argument("--profile", type=int, default=0, metavar="N", help="cProfile N controlled steps")
    parser.add_argument("--json", action="store_true", help="print one JSON object on the last line")
    args = parser.parse_args()
    steps, rounds = (20, 2) if args.quick else (args.steps, args.rounds)
    with tempfile.TemporaryDirectory() as tmp:
        res = measure(steps, rounds, Path(tmp) / "decisions.jsonl", prof=args.profile)

    def fmt(xs: list[float]) -> str:
        return ", ".join(f"{x:.3f}" for x in xs)

    print(f"load average: {res['load_1m']:.2f}; {rounds} rounds x {steps} steps per graph")
    print(
        f"plain ToolNode:         {res['plain_step_ms']:.3f} ms/step "
        f"(round medians: {fmt(res['plain_rounds_ms'])})"
    )
    print(
        f"ControlledToolNode:     {res['controlled_step_ms']:.3f} ms/step "
        f"(round medians: {fmt(res['controlled_rounds_ms'])}; {res['log_records']} verdicts logged)"
    )
    print(
        f"  without a DecisionLog: {res['unlogged_step_ms']:.3f} ms/step ({res['ratio_unlogged']:.3f}x plain)"
    )
    print(
        f"ratio controlled/plain: {res['ratio']:.3f}x (target <= {RATIO_TARGET:.2f}x: "
        f"{'met' if res['ratio_met'] else 'NOT met'})"
    )
    print(f"  median of the rounds' own ratios: {res['ratio_paired']:.3f}x")
    print(
        f"overhead per decision:  {res['per_decision_ms']:.3f} ms vs plain ToolNode "
        f"(target <= {PER_DECISION_TARGET_MS} ms: "
        f"{'met' if res['per_decision_met'] else 'NOT met'})"
    )
    if args.json:
        print(json.dumps(res))


if __name__ == "__main__":
    main()
