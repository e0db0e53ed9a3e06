"""Faulty tools under ``ControlledToolNode``, and wall-time budgets against faults.

Each kind of fault (raising, hanging, wrong types, huge outputs, flaky) runs through a real LangGraph
graph writing a real decision log, sync and async, and must end in a logged verdict, never a crash.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from langchain_core.messages import AIMessage, HumanMessage

from retryctl.audit import verify_log
from retryctl.controller import (
    Budget,
    Ledger,
    Policy,
)
from retryctl.exceptions import ConfigError
from retryctl.models import OpenAIBackend, RetrySettings
from retryctl.nodes import TOOL_POLICY, ControlledStep, ControlledToolNode, verdict_of
from tests.models._fault_server import status
from tests.reliability._faulty_tools import HUGE_BYTES, WRONG_TYPE_VALUES, RateLimited
from tests.reliability._harness import (
    SimClock,
    actions,
    assert_promises,
    call_tools,
    calls_to,
    invoke,
    numeric,
    shorter_than,
    tool_graph,
    verdicts,
)


class TestFaultyTools:
    def test_raising_tools_end_in_verdicts_without_tracebacks(self, log, mode, tools) -> None:
        path, sim = Path(log.path), SimClock()
        node = ControlledToolNode(
            [
                tools.raising("bad_input", lambda: ValueError("query must be a date")),
                tools.raising("broken", lambda: RuntimeError("disk on fire")),
                tools.raising("unreachable", lambda: ConnectionError("no route to host")),
            ],
            handle_tool_errors=True,  # ToolNode's meaning: an error that ends a call becomes a message
            policy=Policy(weights={"validators": 1.0}, max_retries=2),
            log=log,
            sleep=sim.sleep,
            asleep=sim.asleep,
        )
        out = call_tools(tool_graph(node), ["bad_input", "broken", "unreachable"], mode)
        last = {name: actions(path, f"tool:{name}:{m.tool_call_id}")[-1] for name, m in out.items()}
        assert last == {"bad_input": "refine", "broken": "stop", "unreachable": "stop"}
        # The tool's own errors end as ToolNode ends them; the transient one is the controller's.
        fix = "\n Please fix your mistakes."
        assert out["bad_input"].content == "Error: ValueError('query must be a date')" + fix
        assert out["broken"].content == "Error: RuntimeError('disk on fire')" + fix
        assert verdict_of(out["bad_input"]) is None and verdict_of(out["broken"]) is None
        assert (verdict_of(out["unreachable"]) or {}).get("status") == "stopped"
        assert "retryctl stopped this tool call" in str(out["unreachable"].content)
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
        assert (verdict_of(out["slow"]) or {}).get("served_by") == "backup"
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
            handle_tool_errors=True,
            log=log,
        )
        out = call_tools(tool_graph(node), names, mode)
        got = {name: actions(path, f"tool:{name}:{m.tool_call_id}")[-1] for name, m in out.items()}
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
            handle_tool_errors=True,
            log=log,
        )
        out = call_tools(tool_graph(node), ["dump", "checked", "shouty"], mode)
        assert actions(path, "tool:dump:c0") == ["accept"]
        assert len(str(out["dump"].content)) == HUGE_BYTES
        assert actions(path, "tool:checked:c1") == ["refine"]
        assert f"{HUGE_BYTES} characters, limit 1000000" in str(out["checked"].content)
        assert (verdict_of(out["checked"]) or {}).get("action") == "refine"
        assert actions(path, "tool:shouty:c2") == ["refine"]
        # The log records verdicts, not payloads: three verdicts stay small whatever the tools returned,
        # and the reason a huge error message becomes is cut; the message is ToolNode's, whole.
        assert path.stat().st_size < 64 * 1024
        assert str(out["shouty"].content).startswith("Error: ValueError('xxx")
        assert len(str(out["shouty"].content)) > HUGE_BYTES
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
        assert (verdict_of(out["flaky"]) or {}).get("action") == "accept"
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
            run_ledger=Ledger(Budget(wall_s=20), clock=sim.clock),
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
            run_ledger=Ledger(Budget(wall_s=20), clock=sim.clock),
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

    def test_a_backoff_the_wall_budget_cannot_pay_is_not_slept(self, log, mode, tools) -> None:
        path, sim = Path(log.path), SimClock()
        node = ControlledToolNode(
            [tools.raising("down", lambda: ConnectionError("refused"))],
            policy=Policy(weights={"validators": 1.0}, max_retries=5),
            run_ledger=Ledger(Budget(wall_s=0.7), clock=sim.clock),
            log=log,
            sleep=sim.sleep,
            asleep=sim.asleep,
        )
        call_tools(tool_graph(node), ["down"], mode)
        # Exponential 0.5, then 1.0 with 0.2 s left: that retry would start after the budget is
        # spent, so it is not given (nor its wait slept, cut or whole): the stop comes at once.
        assert sim.slept == pytest.approx([0.5])
        assert actions(path, "tool:down:c0") == ["retry", "stop"]
        assert "would be retried after a wait of 1s, but only 0.2s of the wall_s budget is left" in (
            verdicts(path)[-1].reason
        )
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
        capped = "asks for a wait of 600s (120s as the backoff waits it), but only 29.5s of the wall_s"
        assert f"{capped} budget is left" in out["result"]["reason"]
        assert sim.slept == [0.5]
        [run_id] = {r.run_id for r in verdicts(path)}  # no run id in the config: one drawn for the run
        assert_promises(path, run_id)

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
