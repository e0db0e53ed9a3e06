"""ControlledToolNode and the budget ledger: a user's ``extend`` raises the limit, it never turns
accounting off."""

from __future__ import annotations

from typing import Any

from langchain_core.messages import AIMessage, HumanMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.types import Command

from retryctl.audit import DecisionLog, VerdictRecord, read_records
from retryctl.controller import Budget, Ledger, ManualClock, Policy
from tests.nodes._support import RateLimited, Runner, StreamingToolNode
from tests.nodes.test_tool_node import Calls, graph_of, tool_messages

ASK_ON_EXHAUSTION = Policy(weights={"validators": 1.0}, on_budget_exhausted="ask_user")


def turn(call_id: str, expression: str) -> dict[str, Any]:
    call = {"name": "calculator", "args": {"expression": expression}, "id": call_id}
    return {"messages": [HumanMessage("go"), AIMessage(content="", tool_calls=[call])]}


def extend(attempts: int) -> Command[Any]:
    return Command(resume={"action": "extend", "budget": {"attempts": attempts}})


class TestExtendedCallsAreCharged:
    def test_an_extended_call_is_committed_on_the_ledger(self, run: Runner, tmp_path: Any) -> None:
        calls, ledger = Calls(), Ledger(Budget(attempts=1))
        path = tmp_path / "log.jsonl"
        with DecisionLog(path) as log:
            node = StreamingToolNode(
                [calls.calculator()], run_ledger=ledger, policy=ASK_ON_EXHAUSTION, log=log
            )
            graph = graph_of(node, InMemorySaver())
            config = {"configurable": {"thread_id": "t"}}
            assert run(graph, turn("call-1", "1"), config).actions == ["accept"]
            first = run(graph, turn("call-9", "2"), config)
            assert first.actions == ["ask_user"]
            out = run(graph, extend(1), config)
        assert out.actions == ["retry", "accept"]  # the user's extension is logged as a retry
        assert tool_messages(out)[-1].content == "42"
        assert calls.names() == ["calculator", "calculator"]
        snap = ledger.snapshot()
        assert snap.used["attempts"] == 2  # both calls are on the ledger
        assert snap.limit["attempts"] == 2  # the extension raised the limit by the one attempt granted
        assert snap.reserved["attempts"] == 0
        verdicts = [r for r in read_records(path) if isinstance(r, VerdictRecord)]
        # The user's extension is on the record, with the evidence the person decided on.
        assert [r.action.value for r in verdicts] == ["accept", "ask_user", "retry", "accept"]
        reply = {"action": "extend", "answer": None, "budget": {"attempts": 1.0}}
        assert verdicts[2].extra == {"decided_by": "user", "reply": reply}
        assert [r.budget.used["attempts"] for r in verdicts] == [1, 1, 1, 2]
        assert [r.budget.limit["attempts"] for r in verdicts] == [1, 1, 1, 2]

    def test_the_extended_limit_holds_for_later_calls_too(self, run: Runner) -> None:
        calls, ledger = Calls(), Ledger(Budget(attempts=0))
        node = StreamingToolNode([calls.calculator()], run_ledger=ledger, policy=ASK_ON_EXHAUSTION)
        graph = graph_of(node, InMemorySaver())
        config = {"configurable": {"thread_id": "t"}}
        assert run(graph, turn("call-1", "1"), config).actions == ["ask_user"]
        assert run(graph, extend(2), config).actions == ["retry", "accept"]
        assert run(graph, turn("call-2", "2"), config).actions == ["accept"]  # the second granted call
        assert run(graph, turn("call-3", "3"), config).actions == ["ask_user"]  # and no more
        assert calls.names() == ["calculator", "calculator"]
        snap = ledger.snapshot()
        assert (snap.used["attempts"], snap.limit["attempts"]) == (2, 2)

    def test_a_reply_naming_no_attempts_grants_one_and_the_limits_it_names(self, run: Runner) -> None:
        calls, ledger = Calls(), Ledger(Budget(attempts=0, samples=4))
        node = StreamingToolNode([calls.calculator()], run_ledger=ledger, policy=ASK_ON_EXHAUSTION)
        graph = graph_of(node, InMemorySaver())
        config = {"configurable": {"thread_id": "t"}}
        run(graph, turn("call-1", "1"), config)
        out = run(graph, Command(resume={"action": "extend", "budget": {"samples": 2}}), config)
        assert out.actions == ["retry", "accept"]
        snap = ledger.snapshot()
        assert (snap.used["attempts"], snap.limit["attempts"], snap.limit["samples"]) == (1, 1, 6)

    def test_a_spent_wall_clock_is_not_bypassed_by_more_attempts(self, run: Runner) -> None:
        clock = ManualClock()
        calls, ledger = Calls(), Ledger(Budget(wall_s=10), clock=clock)
        node = StreamingToolNode([calls.calculator()], run_ledger=ledger, policy=ASK_ON_EXHAUSTION)
        graph = graph_of(node, InMemorySaver())
        config = {"configurable": {"thread_id": "t"}}
        clock.advance(11)
        assert run(graph, turn("call-1", "1"), config).actions == ["ask_user"]
        again = run(graph, extend(1), config)
        assert again.actions == ["retry", "ask_user"]  # the wall clock is what is spent: asked again
        assert "'wall_s' is spent" in again.interrupts[0].value["reason"]
        out = run(graph, Command(resume={"action": "extend", "budget": {"wall_s": 60}}), config)
        assert out.actions == ["retry", "accept"]  # the second answer only: the first one is not replayed
        assert calls.names() == ["calculator"]

    def test_a_step_ledger_is_extended_with_its_run(self, run: Runner) -> None:
        calls, ledger = Calls(), Ledger(Budget(attempts=5))
        step = ledger.step("tools", budget=Budget(attempts=0))
        node = StreamingToolNode([calls.calculator()], run_ledger=step, policy=ASK_ON_EXHAUSTION)
        graph = graph_of(node, InMemorySaver())
        config = {"configurable": {"thread_id": "t"}}
        assert run(graph, turn("call-1", "1"), config).actions == ["ask_user"]
        out = run(graph, extend(1), config)
        assert out.actions == ["retry", "accept"]
        step_snap = step.snapshot()
        assert (step_snap.used["attempts"], step_snap.limit["attempts"]) == (1, 1)
        assert step_snap.parent is not None
        assert (step_snap.parent.used["attempts"], step_snap.parent.limit["attempts"]) == (1, 6)
        evidence = out.verdicts[-1]["verdict"]["evidence"]
        assert (evidence["budget_used"]["attempts"], evidence["budget_limit"]["attempts"]) == (1, 1)


class TestFailedCallsAreCharged:
    """A call that ran and raised cost an attempt: a flaky tool cannot be retried past the budget."""

    @staticmethod
    def _flaky(failures: int) -> Any:
        from langchain_core.tools import tool

        seen: list[int] = []

        @tool
        def calculator(expression: str) -> str:
            """Evaluate an arithmetic expression."""
            seen.append(1)
            if len(seen) <= failures:
                raise ConnectionError("connection reset by peer")
            return "42"

        return calculator, seen

    def test_each_failed_try_is_on_the_ledger(self, run: Runner) -> None:
        calculator, seen = self._flaky(failures=2)
        ledger = Ledger(Budget(attempts=5))
        node = StreamingToolNode([calculator], run_ledger=ledger, sleep=lambda s: None, asleep=_no_wait)
        out = run(graph_of(node), turn("call-1", "6*7"), {"configurable": {"thread_id": "t"}})
        assert out.actions == ["retry", "retry", "accept"]
        assert len(seen) == 3
        assert ledger.snapshot().used["attempts"] == 3

    def test_the_attempts_budget_stops_a_tool_that_keeps_failing(self, run: Runner) -> None:
        calculator, seen = self._flaky(failures=10)
        ledger = Ledger(Budget(attempts=2))
        node = StreamingToolNode([calculator], run_ledger=ledger, sleep=lambda s: None, asleep=_no_wait)
        out = run(graph_of(node), turn("call-1", "6*7"), {"configurable": {"thread_id": "t"}})
        # The second failure spends the budget: no retry is given that it could not pay for.
        assert out.actions == ["retry", "stop"]
        assert len(seen) == 2
        assert "attempts" in str(tool_messages(out)[-1].content)
        assert ledger.snapshot().used["attempts"] == 2


class TestNoWaitForARetryTheBudgetCannotPay:
    """A verdict that needs an attempt reserves it first: the last attempt's 429 is a stop at once,
    not a 3 s sleep and then the stop."""

    def test_a_rate_limited_tool_stops_at_the_spent_budget_without_sleeping(
        self, run: Runner, tmp_path: Any
    ) -> None:
        from langchain_core.tools import tool

        tried: list[int] = []

        @tool
        def calculator(expression: str) -> str:
            """Evaluate an arithmetic expression."""
            tried.append(1)
            raise RateLimited("3")

        slept: list[float] = []

        async def asleep(seconds: float) -> None:
            slept.append(seconds)

        path = tmp_path / "log.jsonl"
        ledger = Ledger(Budget(attempts=2))
        with DecisionLog(path) as log:
            node = StreamingToolNode(
                [calculator], run_ledger=ledger, sleep=slept.append, asleep=asleep, log=log
            )
            out = run(graph_of(node), turn("call-1", "6*7"), {"configurable": {"thread_id": "t"}})
        assert out.actions == ["retry", "stop"]
        assert len(tried) == 2 and slept == [3.0]  # the first retry's wait; none before the stop
        retry, stop = [r for r in read_records(path) if isinstance(r, VerdictRecord)]
        assert retry.retry_after_s == 3.0
        assert stop.action.value == "stop" and stop.retry_after_s is None
        assert stop.reason.startswith("run budget 'attempts' is spent (2 of 2); the retry it called for")
        assert (stop.budget.used["attempts"], stop.budget.limit["attempts"]) == (2, 2)


async def _no_wait(seconds: float) -> None:
    return None
