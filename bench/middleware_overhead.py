"""Middleware overhead per agent run: ``create_agent`` with ``RetryController`` against the same agent
with no middleware, both on a scripted tool-calling model and a no-op tool.

    .venv/bin/python bench/middleware_overhead.py [--steps 300] [--rounds 7] [--quick] [--json] [--profile N]

A step is one ``agent.invoke`` of a fresh question: the scripted model asks for the no-op tool, the
tool answers, the model answers (two model calls and one tool call), so each step pays what a real
agent run pays: LangChain's agent graph, LangGraph's Pregel loop, the model's and the tool's callbacks,
and (controlled) the controller's verdict on every call, written to a real ``DecisionLog`` in a
temporary file. A third agent runs the controller without a log, to show what the durable record
costs; a fourth has a pass-through middleware (``wrap_model_call`` and ``wrap_tool_call`` that only
call the handler), to show what any middleware costs before the controller does anything; a fifth is
that pass-through writing one verdict record per call and deciding nothing (the floor of any middleware
that keeps a durable record of every decision: no controller can cost less than it). Rounds
rotate the agents so machine load hits all alike; each round's figure is the median step time and
the best round of each is reported (best-of-N medians), with the median of the rounds' own
ratios as a second view. The overhead per decision is (controlled -
bare) / the verdicts logged per step. Targets, the tool node's (``bench/controller_overhead.py``):
controlled / bare <= 1.10 and <= 0.5 ms per decision.

With ``--profile N`` the controlled agent is also run N times under cProfile, the tool calls' worker
threads included, and the top functions by own time and by cumulative time are printed (the figures
are inflated by the profiler, several times over: compare them with one another, not with the
timings).
"""

from __future__ import annotations

import argparse
import functools
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
from langchain.agents import create_agent
from langchain.agents.middleware import AgentMiddleware
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.tools import tool

from retryctl.audit import DecisionLog, verify_log
from retryctl.controller import Action, Evidence, Verdict
from retryctl.middleware import RetryController

RATIO_TARGET = 1.10
PER_DECISION_TARGET_MS = 0.5

_call_ids = itertools.count()


class ScriptedToolCaller(BaseChatModel):
    """Asks for ``noop`` until the last message is its result, then answers: two calls per run."""

    def _generate(
        self, messages: list[BaseMessage], stop: list[str] | None = None, run_manager: Any = None, **_: Any
    ) -> ChatResult:
        if isinstance(messages[-1], ToolMessage):
            message = AIMessage("done")
        else:
            call = {"name": "noop", "args": {}, "id": f"call-{next(_call_ids)}", "type": "tool_call"}
            message = AIMessage("", tool_calls=[call])
        return ChatResult(generations=[ChatGeneration(message=message)])

    def bind_tools(self, tools: Any, **_: Any) -> ScriptedToolCaller:
        return self

    @property
    def _llm_type(self) -> str:
        return "scripted-tool-caller"


class PassThrough(AgentMiddleware):
    """Both call hooks, doing nothing but calling the handler: what any middleware costs."""

    def wrap_model_call(self, request: Any, handler: Callable[[Any], Any]) -> Any:
        return handler(request)

    def wrap_tool_call(self, request: Any, handler: Callable[[Any], Any]) -> Any:
        return handler(request)


_FIXED = Verdict(
    action=Action.ACCEPT,
    reason="confidence 1.00 >= threshold 0.80",
    confidence=1.0,
    evidence=Evidence(signals={"validators": 1.0}, thresholds={"accept": 0.8}),
)


class RecordOnly(PassThrough):
    """The pass-through plus one verdict record per call, the same verdict object every time (the
    log's cheapest path): the least a durable, hash-chained record of every decision can cost, with no
    decision made."""

    def __init__(self, log: DecisionLog) -> None:
        self.log = log
        self.calls = itertools.count(1)

    def _record(self, target: str) -> None:
        self.log.append_verdict(
            _FIXED,
            run_id="floor",
            step_id=f"{target}:{next(self.calls)}",
            attempt=1,
            candidates_summary={"target": target},
            latency_ms=0.5,
            target=target,
        )

    def wrap_model_call(self, request: Any, handler: Callable[[Any], Any]) -> Any:
        answer = handler(request)
        self._record("model")
        return answer

    def wrap_tool_call(self, request: Any, handler: Callable[[Any], Any]) -> Any:
        answer = handler(request)
        self._record("tool")
        return answer


@tool
def noop() -> str:
    """Do nothing and say so."""
    return "ok"


def build(middleware: list[Any]) -> Any:
    return create_agent(ScriptedToolCaller(), [noop], middleware=middleware)


def round_median(agent: Any, steps: int) -> float:
    """Median seconds per step over ``steps`` runs (inputs built outside the timed region)."""
    inputs = [{"messages": [("user", f"question {i}")]} for i in range(steps)]
    times = []
    for payload in inputs:
        began = time.perf_counter()
        out = agent.invoke(payload)
        times.append(time.perf_counter() - began)
    assert out["messages"][-1].content == "done", out
    assert out["messages"][-2].content == "ok", out
    return statistics.median(times)


def measure(steps: int, rounds: int, log_path: Path, *, prof: int = 0) -> dict[str, Any]:
    log = DecisionLog(log_path)
    floor_log = DecisionLog(log_path.with_name("floor.jsonl"))
    agents: dict[str, Any] = {
        "bare": build([]),
        "controlled": build([RetryController(log=log)]),
        # The same controller without a decision log: how much of the overhead is the durable record.
        "unlogged": build([RetryController()]),
        # Any middleware at all: LangChain's wrapping of the hooks, before the controller does anything.
        "passthrough": build([PassThrough()]),
        # The pass-through writing one record per call and deciding nothing: the floor of any
        # middleware that keeps a durable record of every decision.
        "floor": build([RecordOnly(floor_log)]),
    }
    warmup = max(20, steps // 10)
    for agent in agents.values():  # imports, pydantic schema caches, the log file's first open
        round_median(agent, warmup)
    runs = rotated_rounds(
        {name: functools.partial(round_median, agent, steps) for name, agent in agents.items()}, rounds
    )
    if prof:
        controlled = agents["controlled"]
        inputs = [{"messages": [("user", f"profiled {i}")]} for i in range(prof)]
        profile_threads(
            lambda: [controlled.invoke(payload) for payload in inputs],
            label=f"{prof} controlled runs",
            top=30,
        )
    log.close()
    floor_log.close()
    report = verify_log(log_path)
    assert report.ok, report
    decisions_per_step = report.records / (rounds * steps + warmup + prof)
    best = {name: min(times) for name, times in runs.items()}
    ratio = best["controlled"] / best["bare"]
    per_decision_ms = (best["controlled"] - best["bare"]) * 1000.0 / decisions_per_step
    return {
        "steps_per_round": steps,
        "rounds": rounds,
        "bare_step_ms": best["bare"] * 1000.0,
        "controlled_step_ms": best["controlled"] * 1000.0,
        "unlogged_step_ms": best["unlogged"] * 1000.0,
        "passthrough_step_ms": best["passthrough"] * 1000.0,
        "rounds_ms": {name: [t * 1000.0 for t in times] for name, times in runs.items()},
        "ratio": ratio,
        "ratio_unlogged": best["unlogged"] / best["bare"],
        "ratio_paired": paired_ratio(runs, "controlled", "bare"),
        "ratio_passthrough": best["passthrough"] / best["bare"],
        "floor_step_ms": best["floor"] * 1000.0,
        "ratio_floor": best["floor"] / best["bare"],
        "decisions_per_step": decisions_per_step,
        "per_decision_ms": per_decision_ms,
        "per_decision_vs_passthrough_ms": (best["controlled"] - best["passthrough"])
        * 1000.0
        / decisions_per_step,
        "log_records": report.records,
        "ratio_met": ratio <= RATIO_TARGET,
        "per_decision_met": per_decision_ms <= PER_DECISION_TARGET_MS,
        "load_1m": os.getloadavg()[0],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=300, help="agent runs per round")
    parser.add_argument("--rounds", type=int, default=7, help="rounds per agent (best median is kept)")
    parser.add_argument("--quick", action="store_true", help="a few steps: check that it runs")
    parser.add_argument("--profile", type=int, default=0, metavar="N", help="cProfile N controlled runs")
    parser.add_argument("--json", action="store_true", help="print one JSON object on the last line")
    args = parser.parse_args()
    steps, rounds = (20, 2) if args.quick else (args.steps, args.rounds)
    with tempfile.TemporaryDirectory() as tmp:
        res = measure(steps, rounds, Path(tmp) / "decisions.jsonl", prof=args.profile)

    def fmt(name: str) -> str:
        return ", ".join(f"{x:.3f}" for x in res["rounds_ms"][name])

    print(f"load average: {res['load_1m']:.2f}; {rounds} rounds x {steps} runs per agent")
    print(f"bare create_agent:        {res['bare_step_ms']:.3f} ms/run (round medians: {fmt('bare')})")
    print(
        f"pass-through middleware:  {res['passthrough_step_ms']:.3f} ms/run "
        f"({res['ratio_passthrough']:.3f}x bare; round medians: {fmt('passthrough')})"
    )
    print(
        f"records only (floor):     {res['floor_step_ms']:.3f} ms/run "
        f"({res['ratio_floor']:.3f}x bare; round medians: {fmt('floor')})"
    )
    print(
        f"RetryController + log:    {res['controlled_step_ms']:.3f} ms/run "
        f"(round medians: {fmt('controlled')}; {res['log_records']} records, "
        f"{res['decisions_per_step']:.2f} per run)"
    )
    print(
        f"  without a DecisionLog:  {res['unlogged_step_ms']:.3f} ms/run ({res['ratio_unlogged']:.3f}x bare)"
    )
    print(
        f"ratio controlled/bare:    {res['ratio']:.3f}x (target <= {RATIO_TARGET:.2f}x: "
        f"{'met' if res['ratio_met'] else 'NOT met'})"
    )
    print(f"  median of the rounds' own ratios: {res['ratio_paired']:.3f}x")
    print(
        f"overhead per decision:    {res['per_decision_ms']:.3f} ms vs bare "
        f"(target <= {PER_DECISION_TARGET_MS} ms: {'met' if res['per_decision_met'] else 'NOT met'}); "
        f"{res['per_decision_vs_passthrough_ms']:.3f} ms vs the pass-through middleware"
    )
    if args.json:
        print(json.dumps(res))


if __name__ == "__main__":
    main()
