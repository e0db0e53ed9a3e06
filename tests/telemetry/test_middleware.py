"""The ``create_agent`` middleware's spans: a model call and tool calls, retried, switched and stopped."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from langchain_core.messages import BaseMessage
from langchain_core.outputs import ChatResult
from langchain_core.tools import BaseTool, tool
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from retryctl.controller import Budget
from retryctl.middleware import RetryController
from retryctl.telemetry import names
from tests.middleware._scripted import ScriptedChat, call, say
from tests.middleware._support import Agent, ano_wait, multiply, multiply_backup, no_wait, records
from tests.telemetry._spans import attrs, children, evaluation, finished, one


@tool
def broken_multiply(a: float, b: float) -> float:
    """Multiply two numbers (this one is broken)."""
    raise RuntimeError("multiplier crashed")


def _flaky(times: int) -> BaseTool:
    calls = [0]

    @tool
    def flaky_multiply(a: float, b: float) -> float:
        """Multiply two numbers."""
        calls[0] += 1
        if calls[0] <= times:
            raise ConnectionError("connection reset by peer")
        return a * b

    return flaky_multiply


class _Traced(ScriptedChat):
    """A scripted model that makes a span of its own per call, as an instrumented client would."""

    provider: Any

    def _generate(self, messages: list[BaseMessage], *args: Any, **kwargs: Any) -> ChatResult:
        with self.provider.get_tracer("model").start_as_current_span("model inference"):
            return super()._generate(messages, *args, **kwargs)


def _controller(tmp_path: Path, provider: TracerProvider, **kw: object) -> RetryController:
    return RetryController(
        log=tmp_path / "log.jsonl",
        sleep=no_wait,
        asleep=ano_wait,
        tracer_provider=provider,
        **kw,  # type: ignore[arg-type]
    )


class TestMiddlewareSpans:
    def test_a_tool_retried_then_switched(
        self, tmp_path: Path, mode: str, provider: TracerProvider, exporter: InMemorySpanExporter
    ) -> None:
        flaky = _flaky(times=1)
        model = ScriptedChat(script=[call("flaky_multiply", {"a": 6, "b": 7}), say("42")])
        groups = {"arithmetic": [broken_multiply, multiply_backup]}
        controller = _controller(tmp_path, provider, groups=groups)
        Agent(model, [flaky, broken_multiply], controller, mode).ask("6 times 7?")
        spans = finished(exporter)

        tool = one(spans, f"{names.SPAN_TOOL} flaky_multiply")
        assert attrs(tool)[names.KIND] == "tool"
        assert attrs(tool)[names.ACTION] == "accept"
        assert attrs(tool)[names.ATTEMPTS] == 2
        assert attrs(tool)[names.TOOL_CALL_ID]
        first, second = children(spans, tool)
        assert first.name == second.name == "flaky_multiply"
        assert attrs(first)[names.OPERATION_NAME] == "execute_tool"
        assert attrs(first)[names.TOOL_NAME] == "flaky_multiply"
        assert attrs(first)[names.ATTEMPT] == 1
        assert attrs(first)[names.ERROR_TYPE] == "transient"
        assert evaluation(first)[names.EVALUATION_SCORE_LABEL] == "retry"
        assert evaluation(second)[names.EVALUATION_SCORE_LABEL] == "accept"
        assert evaluation(second)[names.EVALUATION_NAME] == "retryctl.verdict"
        assert attrs(second)[names.ATTEMPT] == 2
        # Each attempt span names the decision-log record it stands for.
        logged = {
            (r["step_id"], r["attempt"]): r["hash"]
            for r in records(tmp_path / "log.jsonl")
            if r["kind"] == "verdict"
        }
        assert attrs(second)[names.RECORD_HASH] in logged.values()
        assert attrs(second)[names.RECORD_HASH] == logged[(attrs(second)[names.STEP_ID], 2)]
        assert not first.links and not second.links  # a retry is no switch: no link

    def test_a_switch_links_the_next_attempt_to_the_failed_one(
        self, tmp_path: Path, mode: str, provider: TracerProvider, exporter: InMemorySpanExporter
    ) -> None:
        model = ScriptedChat(script=[call("broken_multiply", {"a": 6, "b": 7}), say("42")])
        groups = {"arithmetic": [broken_multiply, multiply_backup]}
        Agent(model, [broken_multiply], _controller(tmp_path, provider, groups=groups), mode).ask("6 x 7?")
        spans = finished(exporter)
        tool = one(spans, f"{names.SPAN_TOOL} broken_multiply")
        failed, backup = children(spans, tool)
        assert (failed.name, backup.name) == ("broken_multiply", "multiply_backup")
        assert evaluation(failed)[names.EVALUATION_SCORE_LABEL] == "switch"
        assert attrs(failed)[names.SWITCH_TO] == "multiply_backup"
        assert failed.status.status_code.name == "ERROR"
        (link,) = backup.links
        assert failed.context is not None
        assert link.context.span_id == failed.context.span_id
        assert link.context.trace_id == failed.context.trace_id
        assert evaluation(backup)[names.EVALUATION_SCORE_LABEL] == "accept"

    def test_the_model_calls_are_steps_in_the_agents_trace(
        self, tmp_path: Path, mode: str, provider: TracerProvider, exporter: InMemorySpanExporter
    ) -> None:
        model = _Traced(script=[call("multiply", {"a": 6, "b": 7}), say("42")], provider=provider)
        agent = Agent(model, [multiply], _controller(tmp_path, provider), mode)
        # The application's own span around the run: retryctl's spans are its descendants.
        with provider.get_tracer("app").start_as_current_span("agent run"):
            agent.ask("6 times 7?")
        spans = finished(exporter)
        run = one(spans, "agent run")
        first = one(spans, f"{names.SPAN_STEP} model:1")
        second = one(spans, f"{names.SPAN_STEP} model:2")
        tool = one(spans, f"{names.SPAN_TOOL} multiply")
        assert run.context is not None and first.context is not None and tool.context is not None
        assert {s.context.trace_id for s in spans if s.context is not None} == {run.context.trace_id}
        for step in (first, tool, second):
            assert step.parent is not None and step.parent.span_id == run.context.span_id
        assert (
            first.end_time is not None and tool.start_time is not None and first.end_time <= tool.start_time
        )
        (attempt,) = children(spans, first)
        # The attempt span is current while the model is called: a span the model makes nests in it.
        (inner,) = children(spans, attempt)
        assert inner.name == "model inference"
        assert attrs(attempt)[names.OPERATION_NAME] == "chat"
        assert attrs(attempt)[names.REQUEST_MODEL] == attempt.name
        assert attrs(attempt)[names.ACTION] == "accept"
        assert evaluation(attempt)[names.EVALUATION_SCORE_LABEL] == "accept"
        assert attempt.start_time is not None and first.start_time is not None
        assert attempt.start_time >= first.start_time

    def test_a_budget_stop(
        self, tmp_path: Path, mode: str, provider: TracerProvider, exporter: InMemorySpanExporter
    ) -> None:
        model = ScriptedChat(script=[call("multiply", {"a": 6, "b": 7})])
        controller = _controller(tmp_path, provider, budget=Budget(attempts=1))
        Agent(model, [multiply], controller, mode).ask("6 times 7?")
        spans = finished(exporter)
        tool = one(spans, f"{names.SPAN_TOOL} multiply")
        (attempt,) = children(spans, tool)
        assert attrs(attempt)[names.ACTION] == "stop"
        assert attrs(attempt)[names.BUDGET_LIMIT + "attempts"] == 1
        assert attrs(attempt)[names.BUDGET_USED + "attempts"] == 1
        assert attrs(attempt)[names.BUDGET_SCOPE] == "run"
        assert "attempts" in evaluation(attempt)[names.EVALUATION_EXPLANATION]
        assert attrs(tool)[names.ACTION] == "stop"
        # The budget refused the call: the attempt is no tool call, and no error.
        assert attrs(attempt)[names.CALL_MADE] is False
        assert names.OPERATION_NAME not in attrs(attempt) and names.TOOL_NAME not in attrs(attempt)
        assert attempt.status.status_code.name == "UNSET"
        (model_attempt, *_) = children(spans, one(spans, f"{names.SPAN_STEP} model:1"))
        assert attrs(model_attempt)[names.CALL_MADE] is True  # the model call that asked for the tool
        assert attrs(model_attempt)[names.OPERATION_NAME] == "chat"

    def test_a_model_switched_to_its_fallback_links_back(
        self, tmp_path: Path, mode: str, provider: TracerProvider, exporter: InMemorySpanExporter
    ) -> None:
        primary = ScriptedChat(model_name="primary", script=[PermissionError("403: this key may not")])
        backup = ScriptedChat(model_name="backup", script=[say("hello")])
        controller = _controller(tmp_path, provider, fallback_models=[backup])
        Agent(primary, [multiply], controller, mode).ask("hi")
        spans = finished(exporter)
        step = one(spans, f"{names.SPAN_STEP} model:1")
        failed, answered = children(spans, step)
        assert (failed.name, answered.name) == ("primary", "backup")
        assert attrs(failed)[names.REQUEST_MODEL] == "primary"
        assert attrs(failed)[names.ERROR_TYPE] == "terminal"
        assert evaluation(failed)[names.EVALUATION_SCORE_LABEL] == "switch"
        assert attrs(answered)[names.REQUEST_MODEL] == "backup"
        (link,) = answered.links
        assert failed.context is not None and link.context.span_id == failed.context.span_id
        # Made when each verdict was recorded, started back at its attempt's start: in order, in the step.
        assert failed.end_time is not None and answered.end_time is not None and step.end_time is not None
        assert failed.end_time <= answered.end_time <= step.end_time
