"""A ``ControlledStep``'s spans: one ``retryctl.step <id>`` across its nodes, its attempts as children."""

from __future__ import annotations

from typing import Any

import pytest
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.types import Command
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from retryctl.controller import Policy
from retryctl.models import TransientBackendError
from retryctl.nodes import ControlledStep
from retryctl.telemetry import Tracing, _held, names
from retryctl.testing import ScriptedBackend
from tests.telemetry._spans import attrs, children, evaluation, finished, named, one

THREE: dict[str, Any] = {"stopping": "sc-3", "min_samples": 3, "max_samples": 3}
STEP = f"{names.SPAN_STEP} solve"


def _config(thread: str = "t") -> Any:
    return {"configurable": {"thread_id": thread}}


def _question(text: str = "which?") -> Any:
    return {"messages": [{"role": "user", "content": text}]}


class TestStepSpan:
    def test_refine_then_accept_is_one_step_span_with_two_attempts(
        self, provider: TracerProvider, exporter: InMemorySpanExporter
    ) -> None:
        backend = ScriptedBackend(["1", "2", "3", "5", "5", "5"], model="small")
        policy = Policy(**THREE, low_confidence=("refine",))
        step = ControlledStep(backend, policy=policy, step_id="solve", tracer_provider=provider)
        step.compile().invoke(_question(), _config())
        spans = finished(exporter)
        span = one(spans, STEP)
        first, second = children(spans, span)
        assert (first.name, second.name) == ("small", "small")
        assert [attrs(s)[names.ATTEMPT] for s in (first, second)] == [1, 2]
        labels = [evaluation(s)[names.EVALUATION_SCORE_LABEL] for s in (first, second)]
        assert labels == ["refine", "accept"]
        # The middleware's step attributes: what it wraps, how it ended, after how many attempts.
        assert attrs(span)[names.KIND] == "model"
        assert attrs(span)[names.ACTION] == "accept"
        assert attrs(span)[names.ATTEMPTS] == 2
        assert attrs(span)[names.STEP_ID] == "solve"
        assert attrs(span)[names.RUN_ID] == "t"
        assert names.STEP_UNFINISHED not in attrs(span)
        assert span.start_time is not None and first.start_time is not None
        assert span.start_time <= first.start_time  # started back at the first attempt's start
        assert span.end_time is not None and second.end_time is not None
        assert second.end_time <= span.end_time
        assert _held_open(step) == 0

    def test_a_switch_links_the_next_attempt_to_the_failed_one(
        self, provider: TracerProvider, exporter: InMemorySpanExporter
    ) -> None:
        def down(_messages: Any, _params: Any) -> str:
            raise TransientBackendError("unreachable", backend="broken")

        broken = ScriptedBackend([down], model="broken", cycle=True)
        steady = ScriptedBackend(["5"], model="steady", cycle=True)
        policy = Policy(**THREE, max_retries=0)
        step = ControlledStep([broken, steady], policy=policy, step_id="solve", tracer_provider=provider)
        step.compile().invoke(_question(), _config())
        spans = finished(exporter)
        *_, failed, switched = children(spans, one(spans, STEP))  # the broken model's tries, then the switch
        assert (failed.name, switched.name) == ("broken", "steady")
        assert evaluation(failed)[names.EVALUATION_SCORE_LABEL] == "switch"
        assert failed.context is not None
        assert [link.context.span_id for link in switched.links] == [failed.context.span_id]


class TestAskUserSpans:
    def _step(self, provider: TracerProvider, **kwargs: Any) -> ControlledStep:
        backend = ScriptedBackend(["1", "2", "3"], model="small", cycle=True)
        policy = Policy(**THREE, max_refines=0, low_confidence=("ask_user",))
        return ControlledStep(backend, policy=policy, step_id="solve", tracer_provider=provider, **kwargs)

    def test_the_question_ends_the_span_and_the_answer_opens_one_linked_to_it(
        self, provider: TracerProvider, exporter: InMemorySpanExporter
    ) -> None:
        step = self._step(provider)
        graph = step.compile(checkpointer=InMemorySaver())
        graph.invoke(_question(), _config())
        asked = one(finished(exporter), STEP)
        assert attrs(asked)[names.ACTION] == "ask_user"
        (attempt,) = children(finished(exporter), asked)
        assert evaluation(attempt)[names.EVALUATION_SCORE_LABEL] == "ask_user"
        assert asked.status.status_code.name == "UNSET"  # a pause, not a failure
        graph.invoke(Command(resume={"action": "accept"}), _config())
        first, resumed = named(finished(exporter), STEP)
        assert first.context is not None and first.context.span_id == asked.context.span_id
        assert [link.context.span_id for link in resumed.links] == [first.context.span_id]
        (decided,) = children(finished(exporter), resumed)
        assert evaluation(decided)[names.EVALUATION_SCORE_LABEL] == "accept"
        assert attrs(resumed)[names.ACTION] == "accept"
        assert _held_open(step) == 0

    def test_not_interactive_the_question_ends_the_step_and_its_span(
        self, provider: TracerProvider, exporter: InMemorySpanExporter
    ) -> None:
        step = self._step(provider, interactive=False)
        step.compile().invoke(_question(), _config())
        span = one(finished(exporter), STEP)
        assert attrs(span)[names.ACTION] == "ask_user"
        assert len(children(finished(exporter), span)) == 1
        assert _held_open(step) == 0

    def test_a_new_question_on_the_thread_is_not_linked_to_the_unanswered_one(
        self, provider: TracerProvider, exporter: InMemorySpanExporter
    ) -> None:
        step = self._step(provider)
        graph = step.compile(checkpointer=InMemorySaver())
        graph.invoke(_question(), _config())
        graph.invoke(_question("another?"), _config())  # new input: the step begins again
        first, second = named(finished(exporter), STEP)
        assert attrs(first)[names.ACTION] == "ask_user"
        assert list(second.links) == []


class TestHeldSteps:
    def test_past_the_cap_the_oldest_step_is_ended_as_evicted(
        self, provider: TracerProvider, exporter: InMemorySpanExporter, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        monkeypatch.setattr(_held, "MAX_OPEN", 1)
        held = _held.HeldSteps()
        tracer = provider.get_tracer("test")
        held.get(tracer, ("r1", "solve"), start_time=1)
        held.get(tracer, ("r2", "solve"), start_time=2)
        (evicted,) = finished(exporter)
        assert attrs(evicted)[names.STEP_UNFINISHED] == "evicted"
        assert attrs(evicted)[names.RUN_ID] == "r1"
        held.end(("r2", "solve"), "accept")
        assert names.STEP_UNFINISHED not in attrs(finished(exporter)[1])

    def test_a_step_begun_again_ends_its_open_span_as_restarted(
        self, provider: TracerProvider, exporter: InMemorySpanExporter
    ) -> None:
        held = _held.HeldSteps()
        held.get(provider.get_tracer("test"), ("r1", "solve"), start_time=1)
        held.restart(("r1", "solve"))
        (restarted,) = finished(exporter)
        assert attrs(restarted)[names.STEP_UNFINISHED] == "restarted"
        held.restart(("r1", "solve"))  # nothing open: nothing more ends
        assert len(finished(exporter)) == 1


def _held_open(step: ControlledStep) -> int:
    tracing: Tracing = step.emitter.tracing
    assert tracing.steps is not None
    return len(tracing.steps._open)
