"""What the fault-injection suites share: a simulated clock, graph helpers, and the controller's promises.

Time is simulated: every backoff the controller takes advances a manual clock instead of sleeping, so
any wall-time overrun is the controller's own doing. :func:`assert_promises` is the contract every run
must keep: the log verifies, no ledger total in any verdict passes its limit, and every step ends in a
final verdict.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, MessagesState, StateGraph

from retryctl.audit import VerdictRecord, read_records, verify_log
from retryctl.controller import (
    ManualClock,
    ValidatorResult,
)
from retryctl.nodes import ControlledToolNode, StepResult

FINAL_TOOL_ACTIONS = frozenset({"accept", "refine", "stop", "ask_user"})
"""Verdicts that end a tool call (a tool's refine goes back to the model as an error message)."""
FINAL_STEP_ACTIONS = frozenset({"accept", "stop", "ask_user"})
"""Verdicts that end a controlled step (its refine, retry and switch go round again)."""
RUN_WATCHDOG_S = 120.0
"""A run that has not ended by then is hung: dump every thread's stack and fail the session."""


class SimClock:
    """One manual clock for ledgers, breakers and nodes; every injected sleep advances it."""

    def __init__(self) -> None:
        self.clock = ManualClock(1000.0)
        self.slept: list[float] = []
        self.slept_in_calls: list[float] = []

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.clock.advance(seconds)

    async def asleep(self, seconds: float) -> None:
        self.sleep(seconds)

    async def backend_sleep(self, seconds: float) -> None:
        self.slept_in_calls.append(seconds)


class RunState(MessagesState):
    result: StepResult | None


def invoke(graph: Any, value: Any, config: dict[str, Any], mode: str) -> dict[str, Any]:
    if mode == "sync":
        out: dict[str, Any] = graph.invoke(value, config)
        return out
    return dict(asyncio.run(graph.ainvoke(value, config)))


def tool_graph(node: ControlledToolNode) -> Any:
    g = StateGraph(MessagesState)
    g.add_node("tools", node)
    g.add_edge(START, "tools")
    g.add_edge("tools", END)
    return g.compile(checkpointer=InMemorySaver())


def calls_to(*names: str, prefix: str = "c") -> list[dict[str, Any]]:
    return [{"name": n, "args": {"query": "q"}, "id": f"{prefix}{i}"} for i, n in enumerate(names)]


def call_tools(graph: Any, names: list[str], mode: str, thread: str = "t") -> dict[str, ToolMessage]:
    """Run one model turn that calls ``names``; the tool messages by tool name."""
    state = {"messages": [HumanMessage("go"), AIMessage(content="", tool_calls=calls_to(*names))]}
    out = invoke(graph, state, {"configurable": {"thread_id": thread}}, mode)
    return {m.name or "": m for m in out["messages"] if isinstance(m, ToolMessage)}


def verdicts(path: Path, run_id: str | None = None) -> list[VerdictRecord]:
    found = [r for r in read_records(path) if isinstance(r, VerdictRecord)]
    return [r for r in found if run_id is None or r.run_id == run_id]


def actions(path: Path, step_id: str) -> list[str]:
    return [r.action.value for r in verdicts(path) if r.step_id == step_id]


def numeric(content: str, args: dict[str, Any]) -> ValidatorResult:
    """The result must be one finite number."""
    try:
        value = float(content)
    except ValueError:
        return ValidatorResult("numeric", False, f"{content[:40]!r} is not a number")
    return ValidatorResult("numeric", math.isfinite(value), f"{content[:40]!r} is not finite")


def shorter_than(limit: int) -> Callable[[str, dict[str, Any]], ValidatorResult]:
    def short(content: str, args: dict[str, Any]) -> ValidatorResult:
        return ValidatorResult("short", len(content) < limit, f"{len(content)} characters, limit {limit}")

    return short


def assert_promises(path: Path, run_id: str) -> dict[str, VerdictRecord]:
    """The controller's promises about one run's records; returns each step's last record."""
    report = verify_log(path)
    assert report.ok, report.error
    records = verdicts(path, run_id)
    assert records, f"run {run_id} left no verdict in the log"
    for r in records:
        for name, limit in r.budget.limit.items():
            used = r.budget.used.get(name, 0.0)
            # Wall time is a difference of float clock readings: rounding noise is not an overrun.
            slack = 1e-9 if name == "wall_s" else 0.0
            assert limit is None or used <= limit + slack, (
                f"{run_id} {r.step_id} attempt {r.attempt} ({r.action.value}): "
                f"{name} used {used} > limit {limit}"
            )
    last: dict[str, VerdictRecord] = {}
    for r in records:
        last[r.step_id] = r
    for step_id, r in last.items():
        final = FINAL_TOOL_ACTIONS if step_id.startswith("tool:") else FINAL_STEP_ACTIONS
        assert r.action.value in final, f"{run_id} {step_id} ended on {r.action.value}: {r.reason}"
    return last
