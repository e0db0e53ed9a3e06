"""A ``ControlledStep`` in a batch: one batch span, a span per task, the step's attempts inside it."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from langgraph.graph import END, START, MessagesState, StateGraph
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from retryctl.batch import BatchConfig, ResultsFile, Task, run_batch
from retryctl.controller import Budget, Policy
from retryctl.nodes import ControlledStep
from retryctl.telemetry import names
from retryctl.testing import ScriptedBackend
from tests.telemetry._spans import attrs, children, evaluation, finished, named, one

_DRAWN = [0]


def _answer(messages: list[dict[str, Any]], _params: Any) -> str:
    words = str(messages[-1]["content"]).split()
    if words[0] == "add":
        return f"The answer is {int(words[1]) + int(words[2])}"
    _DRAWN[0] += 1
    return f"The answer is {_DRAWN[0]}"  # never the same twice: no agreement


def _graph(provider: TracerProvider) -> Any:
    step = ControlledStep(
        [ScriptedBackend([_answer], model="small", cycle=True)],
        policy=Policy(min_samples=3, max_samples=3, max_refines=5, low_confidence=("refine",)),
        budget=Budget(samples=6),
        step_id="solve",
        tracer_provider=provider,
    )
    graph = StateGraph(MessagesState)
    graph.add_node("solve", step.compile())
    graph.add_edge(START, "solve")
    graph.add_edge("solve", END)
    return graph.compile()


def _batch(tmp_path: Path, provider: TracerProvider, *questions: str) -> None:
    tasks = [Task(id=f"t{i}", question=q) for i, q in enumerate(questions)]
    results = ResultsFile(tmp_path / "results.jsonl")
    try:
        config = BatchConfig(retry_wait_s=0, concurrency=2)
        asyncio.run(run_batch(_graph(provider), tasks, results, config=config, tracer_provider=provider))
    finally:
        results.close()


def _under(spans: list[ReadableSpan], ancestor: ReadableSpan) -> list[ReadableSpan]:
    """Every descendant of ``ancestor``, in the order they started."""
    found, frontier = [], [ancestor]
    while frontier:
        kids = [k for f in frontier for k in children(spans, f)]
        found.extend(kids)
        frontier = kids
    return sorted(found, key=lambda s: s.start_time or 0)


class TestStepInBatchSpans:
    def test_a_span_per_task_under_the_batch_and_the_steps_attempts_in_it(
        self, tmp_path: Path, provider: TracerProvider, exporter: InMemorySpanExporter
    ) -> None:
        _batch(tmp_path, provider, "add 2 3", "hard question")
        spans = finished(exporter)
        batch = one(spans, names.SPAN_BATCH)
        assert batch.parent is None
        assert attrs(batch)[names.BATCH_TASKS] == 2
        tasks = children(spans, batch)
        assert sorted(s.name for s in tasks) == [f"{names.SPAN_TASK} t0", f"{names.SPAN_TASK} t1"]
        easy, hard = (one(spans, f"{names.SPAN_TASK} t{i}") for i in range(2))
        assert attrs(easy)[names.TASK_ID] == "t0"
        # Each task's step in its own span, the step's attempts in the step's.
        (hard_step,) = children(spans, hard)
        assert hard_step.name == f"{names.SPAN_STEP} solve"
        assert {s.name for s in children(spans, hard_step)} == {"small"}

        (step,) = children(spans, easy)
        assert step.name == f"{names.SPAN_STEP} solve"
        assert attrs(step)[names.ACTION] == "accept"
        (accepted,) = children(spans, step)
        assert _under(spans, easy) == [step, accepted]
        assert accepted.name == "small"
        assert attrs(accepted)[names.OPERATION_NAME] == "chat"
        assert attrs(accepted)[names.REQUEST_MODEL] == "small"
        assert attrs(accepted)[names.STEP_ID] == "solve"
        assert attrs(accepted)[names.RUN_ID] == "t0"  # the batch's run id: the task's
        result = evaluation(accepted)
        assert result[names.EVALUATION_SCORE_LABEL] == "accept"
        assert 0.8 <= result[names.EVALUATION_SCORE_VALUE] <= 1.0
        assert attrs(accepted)[names.STOPPING_RULE]
        assert accepted.end_time is not None and easy.end_time is not None
        assert accepted.end_time <= easy.end_time

    def test_a_step_that_spends_its_budget_stops_on_its_last_attempt(
        self, tmp_path: Path, provider: TracerProvider, exporter: InMemorySpanExporter
    ) -> None:
        _batch(tmp_path, provider, "hard question")
        spans = finished(exporter)
        task = one(spans, f"{names.SPAN_TASK} t0")
        (step,) = children(spans, task)
        assert (attrs(step)[names.ACTION], attrs(step)[names.ATTEMPTS]) == ("stop", 2)
        attempts = children(spans, step)
        assert [s.name for s in attempts] == ["small", "small"]
        assert [attrs(s)[names.ATTEMPT] for s in attempts] == [1, 2]
        first, last = (evaluation(s)[names.EVALUATION_SCORE_LABEL] for s in attempts)
        assert (first, last) == ("refine", "stop")
        assert attrs(attempts[1])[names.BUDGET_USED + "samples"] == 6
        assert attrs(attempts[1])[names.BUDGET_LIMIT + "samples"] == 6
        assert "samples" in evaluation(attempts[1])[names.EVALUATION_EXPLANATION]
        assert named(spans, names.SPAN_BATCH)
