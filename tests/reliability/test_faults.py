"""Fault injection: faulty tools and a misbehaving OpenAI-compatible server under the controller.

Every run goes through a real LangGraph graph writing a real decision log, and must keep the
controller's promises: no exception escapes (a run ends normally or at an ``ask_user`` interrupt), no
ledger total in any verdict passes its limit, every wrapped step ends in a logged final verdict, and the
log's hash chain verifies. Breakers are driven through the same graphs, with both real stores and an
injected clock. Time is simulated: every backoff the controller takes advances a manual clock instead
of sleeping.
"""

from __future__ import annotations

import asyncio
import faulthandler
import math
import random
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langchain_core.tools import BaseTool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.types import Command

from retryctl.audit import DecisionLog, VerdictRecord, read_records, verify_log
from retryctl.controller import (
    Breaker,
    BreakerConfig,
    BreakerState,
    BreakerStore,
    Budget,
    Ledger,
    ManualClock,
    MemoryBreakerStore,
    Policy,
    SQLiteBreakerStore,
    ValidatorResult,
)
from retryctl.exceptions import ConfigError
from retryctl.models import OpenAIBackend, RetrySettings
from retryctl.nodes import TOOL_POLICY, ControlledStep, ControlledToolNode, SamplingSchedule, StepResult
from tests.models._fault_server import Reply, cut_connection, hang, ok, raw, status
from tests.reliability._faulty_tools import HUGE_BYTES, WRONG_TYPE_VALUES, FaultyTools, RateLimited

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


@pytest.fixture(params=["sync", "async"])
def mode(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def log(tmp_path: Path) -> Iterator[DecisionLog]:
    with DecisionLog(tmp_path / "log.jsonl") as opened:
        yield opened


@pytest.fixture
def tools() -> Iterator[FaultyTools]:
    made = FaultyTools()
    yield made
    made.release.set()  # frees the threads that timed-out sync calls left waiting


class TestFaultyTools:
    def test_raising_tools_end_in_verdicts_without_tracebacks(self, log, mode, tools) -> None:
        path, sim = Path(log.path), SimClock()
        node = ControlledToolNode(
            [
                tools.raising("bad_input", lambda: ValueError("query must be a date")),
                tools.raising("broken", lambda: RuntimeError("disk on fire")),
                tools.raising("unreachable", lambda: ConnectionError("no route to host")),
            ],
            policy=Policy(weights={"validators": 1.0}, max_retries=2),
            log=log,
            sleep=sim.sleep,
            asleep=sim.asleep,
        )
        out = call_tools(tool_graph(node), ["bad_input", "broken", "unreachable"], mode)
        assert {name: m.artifact["retryctl"]["action"] for name, m in out.items()} == {
            "bad_input": "refine",
            "broken": "stop",
            "unreachable": "stop",
        }
        assert "query must be a date" in str(out["bad_input"].content)
        assert all(m.status == "error" and "Traceback" not in str(m.content) for m in out.values())
        assert actions(path, "tool:unreachable:c2") == ["retry", "retry", "stop"]
        assert tools.count("unreachable") == 3
        assert tools.count("broken") == 1
        assert_promises(path, "t")

    def test_a_hanging_tool_times_out_and_the_group_answers(self, log, mode, tools) -> None:
        path, sim = Path(log.path), SimClock()
        slow, backup = tools.hanging("slow"), tools.ok("backup", "7")
        node = ControlledToolNode(
            [slow],
            groups={"lookup": [slow, backup]},
            policy=Policy(weights={"validators": 1.0}, max_retries=1),
            log=log,
            timeout_s=0.1,
            sleep=sim.sleep,
            asleep=sim.asleep,
        )
        started = time.monotonic()
        out = call_tools(tool_graph(node), ["slow"], mode)
        assert time.monotonic() - started < 10.0  # two 0.1 s timeouts, not the tool's 30 s
        assert out["slow"].content == "7"
        assert out["slow"].artifact["retryctl"]["served_by"] == "backup"
        records = verdicts(path)
        assert [r.action.value for r in records] == ["retry", "switch", "accept"]
        assert records[0].error_class == "transient" and "timed out" in records[0].reason
        assert records[1].switch_to == "backup"
        assert (tools.count("slow"), tools.count("backup")) == (2, 1)
        assert_promises(path, "t")

    def test_zero_timeout_is_refused_naming_the_field(self, tools) -> None:
        with pytest.raises(ConfigError) as info:
            ControlledToolNode([tools.ok("a")], timeout_s=0)
        assert info.value.field == "timeout_s"

    def test_wrong_types_are_judged_by_validators_not_crashed_on(self, log, mode, tools) -> None:
        path = Path(log.path)
        names = [f"wt_{kind}" for kind in WRONG_TYPE_VALUES]
        node = ControlledToolNode(
            [tools.wrong_type(f"wt_{kind}", kind) for kind in WRONG_TYPE_VALUES],
            validators={name: [numeric] for name in names},
            log=log,
        )
        out = call_tools(tool_graph(node), names, mode)
        got = {name: m.artifact["retryctl"]["action"] for name, m in out.items()}
        # 42 is a number; a value that cannot even be printed is a terminal fault with no
        # alternative; everything else reaches the validator and fails it.
        expected = {name: "refine" for name in names} | {"wt_int": "accept", "wt_poisoned": "stop"}
        assert got == expected
        assert "numeric" in str(out["wt_none"].content) and "'null' is not a number" in str(
            out["wt_none"].content
        )
        assert "not finite" in str(out["wt_nan"].content)
        assert_promises(path, "t")

    def test_a_huge_output_is_delivered_whole_and_kept_out_of_the_log(self, log, mode, tools) -> None:
        path = Path(log.path)
        node = ControlledToolNode(
            [
                tools.huge("dump"),
                tools.huge("checked"),
                tools.raising("shouty", lambda: ValueError("x" * HUGE_BYTES)),
            ],
            validators={"checked": [shorter_than(1_000_000)]},
            log=log,
        )
        out = call_tools(tool_graph(node), ["dump", "checked", "shouty"], mode)
        assert out["dump"].artifact["retryctl"]["action"] == "accept"
        assert len(str(out["dump"].content)) == HUGE_BYTES
        assert out["checked"].artifact["retryctl"]["action"] == "refine"
        assert f"{HUGE_BYTES} characters, limit 1000000" in str(out["checked"].content)
        assert out["shouty"].artifact["retryctl"]["action"] == "refine"
        # The log records verdicts, not payloads: three verdicts stay small whatever the tools returned,
        # and the feedback a huge error message becomes is cut to a size a model can read.
        assert path.stat().st_size < 64 * 1024
        assert f"[{HUGE_BYTES - 1000 + len('bad argument: ')} more characters]" in str(out["shouty"].content)
        assert_promises(path, "t")

    @pytest.mark.parametrize(
        ("failures", "expected"),
        [(2, ["retry", "retry", "accept"]), (4, ["retry", "retry", "switch", "accept"])],
    )
    def test_a_flaky_tool_is_retried_after_its_retry_after(
        self, log, mode, tools, failures, expected
    ) -> None:
        path, sim = Path(log.path), SimClock()
        flaky = tools.flaky("flaky", failures, lambda: RateLimited(7.0))
        node = ControlledToolNode(
            [flaky],
            groups={"lookup": [flaky, tools.ok("backup")]},
            policy=Policy(weights={"validators": 1.0}, max_retries=2),
            log=log,
            sleep=sim.sleep,
            asleep=sim.asleep,
        )
        out = call_tools(tool_graph(node), ["flaky"], mode)
        assert out["flaky"].artifact["retryctl"]["action"] == "accept"
        assert actions(path, "tool:flaky:c0") == expected
        assert sim.slept == [7.0, 7.0]  # the server's Retry-After, never less
        assert tools.count("flaky") == 3
        assert_promises(path, "t")


class TestWallBudget:
    """Simulated time moves only when the controller sleeps, so any wall-time overrun is its own doing."""

    def test_a_retry_after_longer_than_the_budget_left_is_not_waited_for(self, log, mode, tools) -> None:
        path, sim = Path(log.path), SimClock()
        node = ControlledToolNode(
            [tools.raising("limited", lambda: RateLimited(90.0))],
            ledger=Ledger(Budget(wall_s=20), clock=sim.clock),
            log=log,
            sleep=sim.sleep,
            asleep=sim.asleep,
        )
        message = call_tools(tool_graph(node), ["limited"], mode)["limited"]
        assert actions(path, "tool:limited:c0") == ["stop"]
        assert "asks for a wait of 90s, but only 20s of the wall_s budget is left" in str(message.content)
        assert sim.slept == []

    def test_with_ask_user_on_exhaustion_a_person_decides_instead(self, log, mode, tools) -> None:
        sim = SimClock()
        node = ControlledToolNode(
            [tools.raising("limited", lambda: RateLimited(90.0))],
            policy=TOOL_POLICY.model_copy(update={"on_budget_exhausted": "ask_user"}),
            ledger=Ledger(Budget(wall_s=20), clock=sim.clock),
            log=log,
            sleep=sim.sleep,
            asleep=sim.asleep,
        )
        graph, config = tool_graph(node), {"configurable": {"thread_id": "t"}}
        state = {"messages": [HumanMessage("go"), AIMessage(content="", tool_calls=calls_to("limited"))]}
        invoke(graph, state, config, mode)
        [pending] = graph.get_state(config).interrupts
        assert "only 20s of the wall_s budget is left" in pending.value["reason"]
        assert actions(Path(log.path), "tool:limited:c0") == ["ask_user"] and sim.slept == []

    def test_a_backoff_is_cut_to_the_wall_budget_left(self, log, mode, tools) -> None:
        path, sim = Path(log.path), SimClock()
        node = ControlledToolNode(
            [tools.raising("down", lambda: ConnectionError("refused"))],
            policy=Policy(weights={"validators": 1.0}, max_retries=5),
            ledger=Ledger(Budget(wall_s=0.7), clock=sim.clock),
            log=log,
            sleep=sim.sleep,
            asleep=sim.asleep,
        )
        call_tools(tool_graph(node), ["down"], mode)
        assert sim.slept == pytest.approx([0.5, 0.2])  # exponential 0.5 then 1.0, cut to what was left
        assert actions(path, "tool:down:c0") == ["retry", "retry", "stop"]
        assert "run budget 'wall_s' is spent (0.7 of 0.7)" in verdicts(path)[-1].reason
        assert tools.count("down") == 2
        assert_promises(path, "t")

    def test_a_step_does_not_sleep_past_its_wall_budget(self, log, mode, fault_server) -> None:
        path, sim = Path(log.path), SimClock()
        backend = OpenAIBackend(model="alpha", base_url=fault_server.url, retry=RetrySettings(attempts=1))
        step = ControlledStep(
            backend,
            policy=Policy(stopping="sc-1", max_samples=1, accept_threshold=0.5),
            budget=Budget(wall_s=30),
            log=log,
            clock=sim.clock,
            sleep=sim.sleep,
            asleep=sim.asleep,
            step_id="solve",
        )
        fault_server.script.extend([status(503), status(429, retry_after="600")])
        try:
            out = invoke(step.compile(), {"messages": [HumanMessage("6*7?")]}, {}, mode)
        finally:
            backend.close()
        assert out["result"]["status"] == "stopped"
        assert actions(path, "solve") == ["retry", "stop"]
        assert (
            "asks for a wait of 600s, but only 29.5s of the wall_s budget is left" in out["result"]["reason"]
        )
        assert sim.slept == [0.5]
        assert_promises(path, "run")

    def test_a_model_call_is_cut_at_the_wall_budget_left(self, log, mode, fault_server) -> None:
        # Real time, on purpose: the backend's own transport retry would wait out a 30 s Retry-After
        # inside one call; the controller must cancel the call when the step's wall budget runs out.
        path = Path(log.path)
        backend = OpenAIBackend(model="alpha", base_url=fault_server.url, retry=RetrySettings(attempts=3))
        step = ControlledStep(
            backend,
            policy=Policy(stopping="sc-1", max_samples=1, accept_threshold=0.5),
            budget=Budget(wall_s=0.8),
            log=log,
            step_id="solve",
        )
        fault_server.script.extend([status(429, retry_after="30")] * 3)
        start = time.monotonic()
        try:
            out = invoke(step.compile(), {"messages": [HumanMessage("6*7?")]}, {}, mode)
        finally:
            backend.close()
        took = time.monotonic() - start
        assert took < 0.8 + 1.0, f"the step ran {took:.2f} s against a 0.8 s wall budget"
        assert out["result"]["status"] == "stopped"
        records = verdicts(path)
        assert "wall budget left" in records[0].reason
        assert "wall_s" in records[-1].reason
        assert verify_log(path).ok


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
            policy=TOOL_POLICY.model_copy(
                update={
                    "max_retries": rng.randint(0, 2),
                    "on_budget_exhausted": rng.choice(["stop", "ask_user"]),
                }
            ),
            breaker=breaker,
            ledger=ledger,
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
        if step_action in ("accept", "stop"):
            assert result["status"] == {"accept": "accepted", "stop": "stopped"}[step_action]
        messages = {m.tool_call_id: m for m in out["messages"] if isinstance(m, ToolMessage)}
        for i, name in enumerate(names):
            call_id = f"{run_id}-c{i}"
            record = last[f"tool:{name}:{call_id}"]
            assert messages[call_id].artifact["retryctl"]["action"] == record.action.value


# -- breakers in real graphs, with both real stores -----------------------------------------------


@pytest.fixture(params=["memory", "sqlite"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[BreakerStore]:
    if request.param == "memory":
        yield MemoryBreakerStore()
        return
    sqlite = SQLiteBreakerStore(tmp_path / "breakers.sqlite")
    yield sqlite
    sqlite.close()


def run_actions(path: Path, run_id: str) -> list[str]:
    return [r.action.value for r in verdicts(path, run_id)]


def last_verdict(path: Path, run_id: str) -> VerdictRecord:
    return verdicts(path, run_id)[-1]


def until_cooled(sim: SimClock, breaker: Breaker, key: str) -> None:
    """Move the clock to the end of ``key``'s cool-down, exactly."""
    opened = breaker.store.get(key).opened_at
    assert opened is not None
    sim.clock.advance(opened + breaker.config.cooldown_s - sim.clock())


class TestBreakers:
    def test_a_failing_tool_opens_is_refused_and_probes_close_it(self, log, mode, tools, store) -> None:
        path, sim = Path(log.path), SimClock()
        config = BreakerConfig(failure_threshold=3, cooldown_s=30, success_threshold=2, half_open_max_calls=2)
        breaker = Breaker(config, store=store, clock=sim.clock)
        tools.down.add("search")
        node = ControlledToolNode(
            [tools.outage("search")],
            policy=Policy(weights={"validators": 1.0}, max_retries=5),
            breaker=breaker,
            log=log,
            sleep=sim.sleep,
            asleep=sim.asleep,
        )
        graph = tool_graph(node)

        def turn(run_id: str) -> ToolMessage:
            return call_tools(graph, ["search"], mode, thread=run_id)["search"]

        # Closed: the third consecutive failure opens it, and that verdict says so (no alternative: stop).
        turn("t1")
        assert run_actions(path, "t1") == ["retry", "retry", "stop"]
        assert "breaker of 'search' is open" in last_verdict(path, "t1").reason
        assert last_verdict(path, "t1").breaker == {"search": "open"}
        assert tools.count("search") == 3 and breaker.state("search") is BreakerState.OPEN

        # Open: calls are refused before they reach the tool.
        sim.clock.advance(10)
        message = turn("t2")
        assert run_actions(path, "t2") == ["stop"] and tools.count("search") == 3
        assert "breaker of 'search' is open" in str(message.content)

        # Half-open after the cool-down: a probe runs; it fails, so the breaker re-opens at once with a
        # fresh cool-down (no retries inside a half-open window).
        until_cooled(sim, breaker, "search")
        assert breaker.state("search") is BreakerState.HALF_OPEN
        turn("t3")
        assert run_actions(path, "t3") == ["stop"] and tools.count("search") == 4
        assert last_verdict(path, "t3").breaker == {"search": "open"}
        assert store.get("search").opened_at == sim.clock()
        sim.clock.advance(29)
        turn("t4")
        assert tools.count("search") == 4  # still cooling down from the failed probe

        # Recovered: two successful probes (success_threshold=2) close it again.
        sim.clock.advance(1)
        tools.down.clear()
        assert turn("t5").content == "42"
        assert last_verdict(path, "t5").breaker == {"search": "half_open"}
        assert turn("t6").content == "42"
        assert last_verdict(path, "t6").breaker == {"search": "closed"}
        assert store.get("search").failures == 0 and tools.count("search") == 6
        assert verify_log(path).ok

    def test_half_open_admits_exactly_the_configured_probes(self, log, mode, tools, store) -> None:
        path, sim = Path(log.path), SimClock()
        config = BreakerConfig(failure_threshold=1, cooldown_s=30, success_threshold=2, half_open_max_calls=2)
        breaker = Breaker(config, store=store, clock=sim.clock)
        breaker.record_failure("search")
        until_cooled(sim, breaker, "search")
        # The probes wait for the mirror, which only a refused third call reaches: if a third probe
        # were admitted, nothing would open the gate and the counts below would show it.
        gate = threading.Event()
        search = tools.gated("search", gate)
        node = ControlledToolNode(
            [search],
            groups={"lookup": [search, tools.opener("mirror", gate)]},
            breaker=breaker,
            log=log,
        )
        out = call_tools(tool_graph(node), ["search", "search", "search"], mode)
        assert (tools.count("search"), tools.count("mirror")) == (2, 1)
        by_call = [actions(path, f"tool:search:c{i}") for i in range(3)]
        assert sorted(by_call) == [["accept"], ["accept"], ["switch", "accept"]]
        [switch] = [r for r in verdicts(path) if r.action.value == "switch"]
        assert "breaker 'search' is open" in switch.reason and switch.switch_to == "mirror"
        assert all(m.content == "42" for m in out.values())
        assert breaker.state("search") is BreakerState.CLOSED

    def test_a_failing_model_opens_its_breaker_and_the_step_switches(
        self, log, mode, store, fault_server
    ) -> None:
        path, sim = Path(log.path), SimClock()
        breaker = Breaker(BreakerConfig(failure_threshold=2, cooldown_s=30), store=store, clock=sim.clock)
        backends = [
            OpenAIBackend(model=name, base_url=fault_server.url, timeout_s=5, retry=RetrySettings(attempts=1))
            for name in ("alpha", "beta")
        ]
        step = ControlledStep(
            backends,
            policy=Policy(stopping="sc-1", max_samples=1, accept_threshold=0.5),
            breaker=breaker,
            log=log,
            clock=sim.clock,
            sleep=sim.sleep,
            asleep=sim.asleep,
            step_id="solve",
        )
        graph = step.compile()

        def solve(run_id: str, *script: Reply) -> list[str]:
            """Run the step; the models it sent requests to."""
            fault_server.script.extend(script)
            seen = len(fault_server.requests)
            out = invoke(
                graph, {"messages": [HumanMessage("6*7?")]}, {"configurable": {"thread_id": run_id}}, mode
            )
            assert out["result"]["status"] == "accepted"
            return [r["model"] for r in fault_server.requests[seen:]]

        try:
            assert solve("r1", status(503), status(503)) == ["alpha", "alpha", "beta"]
            assert run_actions(path, "r1") == ["retry", "switch", "accept"]
            opened = verdicts(path, "r1")[1]
            assert "breaker of 'alpha' is open" in opened.reason and opened.breaker["alpha"] == "open"

            sim.clock.advance(10)
            assert solve("r2") == ["beta"]  # alpha is refused without a request
            assert run_actions(path, "r2") == ["switch", "accept"]
            assert "breaker of 'alpha' is open" in verdicts(path, "r2")[0].reason

            until_cooled(sim, breaker, "alpha")
            assert solve("r3", status(503)) == ["alpha", "beta"]  # the probe fails: open again
            assert breaker.state("alpha") is BreakerState.OPEN
            assert store.get("alpha").opened_at == sim.clock()

            until_cooled(sim, breaker, "alpha")
            assert solve("r4") == ["alpha"]  # the probe succeeds: closed
            assert run_actions(path, "r4") == ["accept"]
            assert breaker.state("alpha") is BreakerState.CLOSED and store.get("alpha").failures == 0
        finally:
            for backend in backends:
                backend.close()
        assert verify_log(path).ok
