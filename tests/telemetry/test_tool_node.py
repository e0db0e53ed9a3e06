"""The ToolNode drop-in's spans: a flaky tool retried, then switched (the next attempt links back)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import AIMessage, HumanMessage
from langchain_core.tools import BaseTool, tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.types import Command
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from retryctl.audit import DecisionLog, read_records
from retryctl.controller import Breaker, BreakerConfig, Budget, Ledger, ManualClock, Policy
from retryctl.nodes import ControlledToolNode
from retryctl.telemetry import names
from tests.telemetry._spans import attrs, children, evaluation, finished, one


def _flaky() -> BaseTool:
    @tool
    def calculator(expression: str) -> str:
        """Evaluate an arithmetic expression."""
        raise ConnectionError("calculation service unreachable")

    return calculator


@tool("calculator")
def steady_calculator(expression: str) -> str:
    """Evaluate an arithmetic expression."""
    return "42"


@tool
def python(code: str) -> str:
    """Run Python code and return what it prints."""
    return "42"


def _graph(node: ControlledToolNode, checkpointer: Any = None) -> Any:
    graph = StateGraph(MessagesState)
    graph.add_node("tools", node)
    graph.add_edge(START, "tools")
    graph.add_edge("tools", END)
    return graph.compile(checkpointer=checkpointer)


CALL = {"name": "calculator", "args": {"expression": "6*7"}, "id": "call-1"}


def _run(node: ControlledToolNode) -> dict[str, Any]:
    out: dict[str, Any] = _graph(node).invoke(
        {"messages": [HumanMessage("go"), AIMessage(content="", tool_calls=[CALL])]}
    )
    return out


def _switching_node(provider: TracerProvider, **kwargs: Any) -> ControlledToolNode:
    calculator = _flaky()
    return ControlledToolNode(
        [calculator],
        groups={"arithmetic": [calculator, python]},
        adapters={"python": lambda args: {"code": f"print({args['expression']})"}},
        breaker=Breaker(BreakerConfig(failure_threshold=2, cooldown_s=60), clock=ManualClock()),
        sleep=lambda _: None,
        tracer_provider=provider,
        **kwargs,
    )


def _hashes(path: Path) -> list[tuple[int, str]]:
    return [(r.attempt, r.hash) for r in read_records(path) if r.kind == "verdict"]


class TestRecordHash:
    """The node writes its records when its pass ends; its spans end then too, at their own times."""

    @pytest.mark.parametrize("run", ["invoke", "ainvoke"])
    def test_each_attempt_span_carries_its_records_hash(
        self, run: str, tmp_path: Path, provider: TracerProvider, exporter: InMemorySpanExporter
    ) -> None:
        path = tmp_path / "log.jsonl"
        with DecisionLog(path) as log:
            graph = _graph(_switching_node(provider, log=log))
            state = {"messages": [HumanMessage("go"), AIMessage(content="", tool_calls=[CALL])]}
            if run == "invoke":
                graph.invoke(state)
            else:
                asyncio.run(graph.ainvoke(state))
        spans = finished(exporter)
        call = one(spans, f"{names.SPAN_TOOL} calculator")
        attempts = children(spans, call)
        assert [(attrs(s)[names.ATTEMPT], attrs(s)[names.RECORD_HASH]) for s in attempts] == _hashes(path)
        # Held to the end of the pass, each span still ends when its attempt did.
        first, second, third = attempts
        assert first.end_time is not None and second.start_time is not None
        assert first.end_time <= second.start_time
        assert second.end_time is not None and third.start_time is not None
        assert second.end_time <= third.start_time
        assert third.end_time is not None and call.end_time is not None
        assert third.end_time <= call.end_time

    def test_the_verdict_on_a_resumed_question_carries_its_hash(
        self, tmp_path: Path, provider: TracerProvider, exporter: InMemorySpanExporter
    ) -> None:
        path = tmp_path / "log.jsonl"
        with DecisionLog(path) as log:
            policy = Policy(weights={"validators": 1.0}, on_budget_exhausted="ask_user")
            node = ControlledToolNode(
                [steady_calculator],
                run_ledger=Ledger(Budget(attempts=0)),
                policy=policy,
                log=log,
                tracer_provider=provider,
            )
            graph = _graph(node, InMemorySaver())
            config: Any = {"configurable": {"thread_id": "t"}}
            graph.invoke({"messages": [AIMessage(content="", tool_calls=[CALL])]}, config)
            graph.invoke(Command(resume={"action": "extend", "budget": {"attempts": 1}}), config)
        spans = finished(exporter)
        hashes = [h for _, h in _hashes(path)]
        assert len(hashes) == 3  # the question, the extension, the accept
        attempts = [s for s in spans if s.name == "calculator"]
        assert sorted(attrs(s).get(names.RECORD_HASH) or "" for s in attempts) == sorted(hashes)


class TestToolNodeSpans:
    def test_retried_then_switched(self, provider: TracerProvider, exporter: InMemorySpanExporter) -> None:
        _run(_switching_node(provider))
        spans = finished(exporter)
        call = one(spans, f"{names.SPAN_TOOL} calculator")
        assert attrs(call)[names.TOOL_CALL_ID] == "call-1"
        assert attrs(call)[names.ACTION] == "accept"
        first, second, third = children(spans, call)
        assert [s.name for s in (first, second, third)] == ["calculator", "calculator", "python"]
        assert [evaluation(s)[names.EVALUATION_SCORE_LABEL] for s in (first, second, third)] == [
            "retry",
            "switch",
            "accept",
        ]
        assert [attrs(s)[names.ATTEMPT] for s in (first, second, third)] == [1, 2, 3]
        assert attrs(second)[names.SWITCH_TO] == "python"
        # The breaker that opened on the second fault is on the verdict that switched.
        assert attrs(second)[names.BREAKER_STATE] == "open"
        assert attrs(second)[names.BREAKER_OPEN] == ("calculator",)
        assert attrs(third)[names.TOOL_NAME] == "python"
        assert attrs(third)[names.OPERATION_NAME] == "execute_tool"
        # Only the switch links: the python attempt to the calculator attempt it replaced.
        assert not first.links and not second.links
        (link,) = third.links
        assert second.context is not None and link.context.span_id == second.context.span_id
        # The fault is judged, not raised: the attempt carries its class and the verdict, no exception.
        assert [e.name for e in first.events] == [names.EVALUATION_EVENT]
        assert attrs(first)[names.ERROR_TYPE] == "transient"
        assert first.status.status_code.name == "ERROR"
        assert third.status.status_code.name == "UNSET"

    def test_a_question_to_the_user_is_no_error_and_the_resumed_call_is_traced_again(
        self, provider: TracerProvider, exporter: InMemorySpanExporter
    ) -> None:
        policy = Policy(weights={"validators": 1.0}, on_budget_exhausted="ask_user")
        node = ControlledToolNode(
            [steady_calculator],
            run_ledger=Ledger(Budget(attempts=0)),
            policy=policy,
            tracer_provider=provider,
        )
        graph = _graph(node, InMemorySaver())
        config: Any = {"configurable": {"thread_id": "t"}}
        graph.invoke({"messages": [AIMessage(content="", tool_calls=[CALL])]}, config)
        (asked,) = [s for s in finished(exporter) if s.name == f"{names.SPAN_TOOL} calculator"]
        # The interrupt leaves through the span: a pause, not a failure.
        assert asked.status.status_code.name == "UNSET"
        assert not [e for e in asked.events if e.name == "exception"]
        (attempt,) = children(finished(exporter), asked)
        assert evaluation(attempt)[names.EVALUATION_SCORE_LABEL] == "ask_user"
        exporter.clear()
        graph.invoke(Command(resume={"action": "extend", "budget": {"attempts": 1}}), config)
        resumed = one(finished(exporter), f"{names.SPAN_TOOL} calculator")
        labels = [evaluation(s)[names.EVALUATION_SCORE_LABEL] for s in children(finished(exporter), resumed)]
        assert labels == ["retry", "accept"]  # the user's extension, then the call's own verdict
        assert attrs(resumed)[names.ACTION] == "accept"

    def test_no_provider_given_and_none_set_makes_no_span(self, exporter: InMemorySpanExporter) -> None:
        node = ControlledToolNode([python], sleep=lambda _: None)
        assert not node.calls.tracing.active  # the global provider is the API's unset proxy here
        graph = StateGraph(MessagesState)
        graph.add_node("tools", node)
        graph.add_edge(START, "tools")
        graph.add_edge("tools", END)
        call = {"name": "python", "args": {"code": "print(42)"}, "id": "c"}
        graph.compile().invoke({"messages": [AIMessage(content="", tool_calls=[call])]})
        assert finished(exporter) == []


class TestRefusedAttempts:
    """An attempt that called nothing (a breaker open, a budget spent, a person's reply) is not dressed
    as a tool call: no ``gen_ai.*`` call attributes, ``retryctl.call_made=false``, and no error status."""

    def test_an_open_breaker_skips_the_call(
        self, provider: TracerProvider, exporter: InMemorySpanExporter
    ) -> None:
        breaker = Breaker(BreakerConfig(failure_threshold=1, cooldown_s=60), clock=ManualClock())
        breaker.report("calculator", failed=True)  # open before the call: the attempt is refused
        node = ControlledToolNode(
            [steady_calculator],
            groups={"arithmetic": [steady_calculator, python]},
            adapters={"python": lambda args: {"code": f"print({args['expression']})"}},
            breaker=breaker,
            sleep=lambda _: None,
            tracer_provider=provider,
        )
        _run(node)
        spans = finished(exporter)
        skipped, ran = children(spans, one(spans, f"{names.SPAN_TOOL} calculator"))
        assert (skipped.name, ran.name) == ("calculator", "python")
        said = attrs(skipped)
        assert said[names.CALL_MADE] is False
        for call_attribute in (names.OPERATION_NAME, names.TOOL_NAME, names.ERROR_TYPE):
            assert call_attribute not in said
        assert said[names.ERROR_CLASS] == "terminal"  # the verdict's evidence, as the log has it
        assert skipped.status.status_code.name == "UNSET"  # a skip, not a failed call
        assert "breaker of 'calculator' is open" in evaluation(skipped)[names.EVALUATION_EXPLANATION]
        assert evaluation(skipped)[names.EVALUATION_SCORE_LABEL] == "switch"
        assert attrs(ran)[names.CALL_MADE] is True
        assert attrs(ran)[names.OPERATION_NAME] == "execute_tool"
        assert attrs(ran)[names.TOOL_NAME] == "python"

    def test_a_spent_budget_and_the_persons_reply_call_nothing(
        self, provider: TracerProvider, exporter: InMemorySpanExporter
    ) -> None:
        policy = Policy(weights={"validators": 1.0}, on_budget_exhausted="ask_user")
        node = ControlledToolNode(
            [steady_calculator],
            run_ledger=Ledger(Budget(attempts=0)),
            policy=policy,
            tracer_provider=provider,
        )
        graph = _graph(node, InMemorySaver())
        config: Any = {"configurable": {"thread_id": "t"}}
        graph.invoke({"messages": [AIMessage(content="", tool_calls=[CALL])]}, config)
        (refused,) = children(finished(exporter), one(finished(exporter), f"{names.SPAN_TOOL} calculator"))
        assert attrs(refused)[names.CALL_MADE] is False
        assert names.OPERATION_NAME not in attrs(refused)
        exporter.clear()
        graph.invoke(Command(resume={"action": "answer", "answer": "42"}), config)
        spans = finished(exporter)
        (answered,) = children(spans, one(spans, f"{names.SPAN_TOOL} calculator"))
        # The person's answer is an attempt span named "user" (the record's target), calling nothing.
        assert answered.name == "user"
        assert attrs(answered)[names.CALL_MADE] is False
        assert names.OPERATION_NAME not in attrs(answered) and names.TOOL_NAME not in attrs(answered)
