"""ControlledStep: the answer an accepted step returns is a candidate of the accepted answer, and the
verdict's record names it (``candidates_summary["chosen"]``, its index among the attempt's draws)."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.memory import InMemorySaver

from retryctl.audit import DecisionLog, VerdictRecord, read_records
from retryctl.controller import Policy, default_equivalence
from retryctl.models import ScriptItem, TransientBackendError
from retryctl.nodes import ControlledStep
from retryctl.testing import ScriptedBackend
from tests.nodes._support import user

_item = st.one_of(
    st.sampled_from(["3", "4", "5"]).map(lambda n: f"The answer is {n}"),
    st.just("I cannot tell"),  # no answer: not a vote
    st.just("503"),  # a failed call
)


def _script(items: list[str]) -> list[ScriptItem]:
    return [TransientBackendError("503", backend="scripted") if i == "503" else i for i in items]


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    items=st.lists(_item, min_size=1, max_size=14),
    min_samples=st.integers(1, 3),
    spare=st.integers(0, 4),
    threshold=st.sampled_from([0.5, 0.8, 0.95]),
)
def test_an_accepted_step_returns_a_candidate_of_its_answer(
    items: list[str], min_samples: int, spare: int, threshold: float
) -> None:
    policy = Policy(
        min_samples=min_samples,
        max_samples=min_samples + spare,
        accept_threshold=threshold,
        low_confidence=("refine", "stop"),
        max_refines=1,
    )
    backend = ScriptedBackend([*_script(items), *["The answer is 9"] * 20])
    config: RunnableConfig = {"configurable": {"thread_id": "t"}}
    with tempfile.TemporaryDirectory() as where:
        path = Path(where) / "log.jsonl"
        step = ControlledStep(backend, policy=policy, log=DecisionLog(path), sleep=lambda s: None)
        graph = step.compile(checkpointer=InMemorySaver())
        out: dict[str, Any] = graph.invoke(user("a number?"), config)  # type: ignore[call-overload]
        verdicts = [r for r in read_records(path) if isinstance(r, VerdictRecord)]
    result = out["result"]
    last = verdicts[-1]
    candidates = graph.get_state(config).values["candidates"]
    event(result["status"])
    if result["status"] != "accepted":
        return
    returned = out["messages"][-1].content
    assert last.action == "accept"
    assert default_equivalence(returned) == last.answer == result["answer"]
    summary = last.candidates_summary
    assert isinstance(summary, dict)
    chosen = summary["chosen"]
    assert isinstance(chosen, int)
    answers = summary["answers"]
    assert isinstance(answers, list) and answers[chosen] == last.answer
    assert candidates[chosen]["text"] == returned == result["text"]
