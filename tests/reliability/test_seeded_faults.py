"""Seeded randomized runs: server faults and tool faults mixed in one real graph.

No exception escapes (a run ends normally or at an ``ask_user`` interrupt), no ledger total in any
verdict passes its limit, every step ends in a logged final verdict, and the log's chain verifies.
"""

from __future__ import annotations

import faulthandler
import random
from collections.abc import Callable
from typing import Any

import pytest
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langchain_core.tools import BaseTool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph
from langgraph.types import Command

from retryctl.audit import DecisionLog
from retryctl.controller import (
    Breaker,
    BreakerConfig,
    Budget,
    Ledger,
    Policy,
)
from retryctl.models import OpenAIBackend, RetrySettings
from retryctl.nodes import TOOL_POLICY, ControlledStep, ControlledToolNode, SamplingSchedule, verdict_of
from tests.models._fault_server import Reply, cut_connection, hang, ok, raw, status
from tests.reliability._faulty_tools import WRONG_TYPE_VALUES, FaultyTools, RateLimited
from tests.reliability._harness import (
    RUN_WATCHDOG_S,
    RunState,
    SimClock,
    assert_promises,
    calls_to,
    invoke,
    numeric,
)

# -- seeded randomized runs: server faults and tool faults in one graph ----------------------------

RUNS = 40
SEED = 7_2024


def maybe(rng: random.Random, low: float, high: float, *, integer: bool = True) -> Any:
    """A limit drawn in [low, high], or ``None`` (no limit) three times in ten."""
    if rng.random() < 0.3:
        return None
    return rng.randint(int(low), int(high)) if integer else round(rng.uniform(low, high), 2)


SERVER_FAULTS: dict[str, Callable[[random.Random], Reply]] = {
    "ok": lambda rng: ok(),
    "429": lambda rng: status(429, retry_after=str(rng.choice([0, 1, 7, 30, 600]))),
    "5xx": lambda rng: status(rng.choice([500, 502, 503])),
    "hang": lambda rng: hang(),
    "garbage": lambda rng: raw(b"<html>502 Bad Gateway</html>", content_type="text/html"),
    "truncated": lambda rng: raw(b'{"choices": [{"message": {"content": "4'),
    "cut": lambda rng: cut_connection(),
    "400": lambda rng: status(400),
    "401": lambda rng: status(401),
}
"""Server faults of the randomized runs by kind: ``make(rng)``."""


def server_script(rng: random.Random) -> list[Reply]:
    script: list[Reply] = []
    hung = False
    for _ in range(rng.randint(0, 6)):
        kind = rng.choice(sorted(SERVER_FAULTS))
        if kind == "hang" and hung:  # a hang costs a real client timeout: one per run is enough
            kind = "5xx"
        hung = hung or kind == "hang"
        script.append(SERVER_FAULTS[kind](rng))
    return script


TOOL_KINDS: dict[str, Callable[[FaultyTools, str, random.Random], BaseTool]] = {
    "ok": lambda tools, name, rng: tools.ok(name),
    "value": lambda tools, name, rng: tools.raising(name, lambda: ValueError("bad query")),
    "runtime": lambda tools, name, rng: tools.raising(name, lambda: RuntimeError("crashed")),
    "conn": lambda tools, name, rng: tools.raising(name, lambda: ConnectionError("refused")),
    "429": lambda tools, name, rng: tools.raising(name, lambda: RateLimited(rng.choice([0.5, 5.0, 90.0]))),
    "hang": lambda tools, name, rng: tools.hanging(name),
    "wrong": lambda tools, name, rng: tools.wrong_type(name, rng.choice(sorted(WRONG_TYPE_VALUES))),
    "huge": lambda tools, name, rng: tools.huge(name, 1024 * 1024),
    "flaky": lambda tools, name, rng: tools.flaky(name, rng.randint(1, 4), ConnectionError),
}
"""Tool faults of the randomized runs by kind: ``make(tools, name, rng)``."""


def random_tools(
    rng: random.Random, tools: FaultyTools
) -> tuple[list[BaseTool], dict[str, list[BaseTool]], dict[str, list[Any]], list[str]]:
    """Faulty tools for one run: the tools, their groups, their validators and the names to call."""
    made: list[BaseTool] = []
    groups: dict[str, list[BaseTool]] = {}
    validators: dict[str, list[Any]] = {}
    hung = False
    for j in range(rng.randint(1, 3)):
        kind = rng.choice(sorted(TOOL_KINDS))
        if kind == "hang" and hung:
            kind = "flaky"
        hung = hung or kind == "hang"
        name = f"{kind}_{j}"
        tool = TOOL_KINDS[kind](tools, name, rng)
        made.append(tool)
        if rng.random() < 0.3:
            groups[f"g{j}"] = [tool, tools.ok(f"backup_{j}")]
        if rng.random() < 0.3:
            validators[name] = [numeric]
    return made, groups, validators, [t.name for t in made]


REPLIES: list[dict[str, Any]] = [
    {"action": "stop"},
    {"action": "accept"},
    {"action": "answer", "answer": "7"},
    {"action": "extend", "budget": {"attempts": 1, "samples": 2, "output_tokens": 256}},
]


def run_graph(step: ControlledStep, node: ControlledToolNode, names: list[str], run_id: str) -> Any:
    def plan(state: RunState) -> dict[str, Any]:
        calls = calls_to(*names, prefix=f"{run_id}-c")
        return {"messages": [AIMessage(content="", tool_calls=calls)]}

    g = StateGraph(RunState)
    g.add_node("solve", step.compile())
    g.add_node("plan", plan)
    g.add_node("tools", node)
    g.add_edge(START, "solve")
    g.add_edge("solve", "plan")
    g.add_edge("plan", "tools")
    g.add_edge("tools", END)
    return g.compile(checkpointer=InMemorySaver())


class TestSeededRuns:
    @pytest.mark.parametrize("index", range(RUNS))
    def test_a_random_mix_of_faults_keeps_every_promise(self, index, tmp_path, fault_server, tools) -> None:
        rng = random.Random(SEED + index)
        run_id, path, sim = f"run-{index}", tmp_path / "log.jsonl", SimClock()
        mode = rng.choice(["sync", "async"])
        fault_server.script.extend(server_script(rng))
        backends = [
            OpenAIBackend(
                model=name,
                base_url=fault_server.url,
                timeout_s=0.25,
                retry=RetrySettings(
                    attempts=rng.randint(1, 2),
                    initial_wait_s=0.01,
                    jitter=False,
                    max_retry_after_s=rng.choice([0.0, 10.0, 60.0]),
                ),
                # A backend's own transport retries happen inside one call, which a wall budget does
                # not cut short (like the call's latency, unseen by the simulated clock): recorded only.
                sleep=sim.backend_sleep,
            )
            for name in ["alpha", "beta"][: rng.randint(1, 2)]
        ]
        breaker = None
        if rng.random() < 0.5:
            limits = BreakerConfig(failure_threshold=rng.randint(1, 3), cooldown_s=rng.choice([1.0, 30.0]))
            breaker = Breaker(limits, clock=sim.clock)
        ledger = Ledger(
            Budget(
                attempts=maybe(rng, 2, 16),
                samples=maybe(rng, 2, 12),
                wall_s=maybe(rng, 5, 120, integer=False),
            ),
            clock=sim.clock,
        )
        log = DecisionLog(path)
        min_samples = rng.randint(1, 2)
        step = ControlledStep(
            backends,
            policy=Policy(
                accept_threshold=rng.choice([0.5, 0.7, 0.9]),
                min_samples=min_samples,
                max_samples=rng.randint(min_samples, 4),
                max_retries=rng.randint(0, 3),
                max_refines=rng.randint(0, 2),
                low_confidence=rng.choice(
                    [("switch", "refine", "ask_user"), ("refine",), ("switch", "stop")]
                ),
                on_budget_exhausted=rng.choice(["stop", "ask_user"]),
            ),
            schedule=SamplingSchedule(max_tokens=64, seed=rng.randrange(1000)),
            budget=Budget(
                attempts=maybe(rng, 1, 8),
                samples=maybe(rng, 1, 10),
                output_tokens=maybe(rng, 64, 1500),
                wall_s=maybe(rng, 1, 60, integer=False),
            ),
            run_ledger=ledger,
            equivalence=lambda text: text.split("-")[0].strip() or None,  # "42-0", "42-1" agree on 42
            breaker=breaker,
            log=log,
            clock=sim.clock,
            sleep=sim.sleep,
            asleep=sim.asleep,
            step_id="solve",
            interactive=rng.random() < 0.5,
        )
        made, groups, validators, names = random_tools(rng, tools)
        node = ControlledToolNode(
            made,
            groups=groups,
            validators=validators,
            handle_tool_errors=True,  # a tool's own error that ends a call becomes ToolNode's message
            policy=TOOL_POLICY.model_copy(
                update={
                    "max_retries": rng.randint(0, 2),
                    "on_budget_exhausted": rng.choice(["stop", "ask_user"]),
                }
            ),
            breaker=breaker,
            run_ledger=ledger,
            log=log,
            timeout_s=0.1,
            clock=sim.clock,
            sleep=sim.sleep,
            asleep=sim.asleep,
        )
        graph = run_graph(step, node, names, run_id)
        config: dict[str, Any] = {"configurable": {"thread_id": run_id}}
        faulthandler.dump_traceback_later(RUN_WATCHDOG_S, exit=True)
        try:
            out = invoke(graph, {"messages": [HumanMessage("What is 6*7?")]}, config, mode)
            for resumes in range(5):
                pending = graph.get_state(config).interrupts
                if not pending:
                    break
                assert resumes < 4, f"{run_id}: still interrupted after {resumes} replies"
                reply = rng.choice(REPLIES) if resumes < 3 else {"action": "stop"}
                out = invoke(graph, Command(resume={i.id: reply for i in pending}), config, mode)
        finally:
            faulthandler.cancel_dump_traceback_later()
            for backend in backends:
                backend.close()
            log.close()

        last = assert_promises(path, run_id)
        snapshot = ledger.snapshot()
        for name, limit in snapshot.limit.items():
            if limit is not None and name != "wall_s":
                assert snapshot.used[name] <= limit, (
                    f"{run_id}: run ledger {name} {snapshot.used[name]} > {limit}"
                )
        # Every wrapped step ended in a logged verdict, and the graph's state agrees with the log.
        result = out["result"]
        assert result is not None and "solve" in last
        step_action = last["solve"].action.value
        if last["solve"].target == "user":  # a person's answer is logged as the step's last verdict
            assert result["status"] == "answered_by_user"
        elif step_action in ("accept", "stop"):
            assert result["status"] == {"accept": "accepted", "stop": "stopped"}[step_action]
        messages = {m.tool_call_id: m for m in out["messages"] if isinstance(m, ToolMessage)}
        for i, name in enumerate(names):
            call_id = f"{run_id}-c{i}"
            record = last[f"tool:{name}:{call_id}"]
            info = verdict_of(messages[call_id])  # None: a first-try result, left as the tool returned it
            if info is None:
                assert record.action.value in ("accept", "refine", "stop") and record.attempt == 1
            else:
                assert info["action"] == record.action.value
