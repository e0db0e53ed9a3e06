"""Breakers in real graphs, with both real stores (memory and SQLite) and an injected clock."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from langchain_core.messages import HumanMessage, ToolMessage

from retryctl.audit import VerdictRecord, verify_log
from retryctl.controller import Breaker, BreakerConfig, BreakerState, BreakerStore, MemoryBreakerStore, Policy
from retryctl.models import OpenAIBackend, RetrySettings
from retryctl.nodes import ControlledStep, ControlledToolNode
from retryctl.runtime import SQLiteBreakerStore
from tests.models._fault_server import Reply, status
from tests.reliability._harness import (
    SimClock,
    actions,
    call_tools,
    invoke,
    tool_graph,
    verdicts,
)

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
