"""The controlled step embedded in a parent graph: results flow back, exhaustion never kills the parent."""

from __future__ import annotations

from typing import Any

from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.types import Command

from retryctl.controller import Budget, Ledger, Policy
from retryctl.nodes import ControlledStep, StepResult
from retryctl.testing import ScriptedBackend
from tests.nodes._support import Runner, user


class Parent(MessagesState):
    result: StepResult | None
    report: str


def report(state: Parent) -> dict[str, Any]:
    result = state["result"]
    assert result is not None
    return {"report": f"{result['status']}: {result['answer']}"}


def parent_with(step: ControlledStep, checkpointer: Any = None) -> Any:
    g = StateGraph(Parent)
    g.add_node("solve", step.compile())
    g.add_node("report", report)
    g.add_edge(START, "solve")
    g.add_edge("solve", "report")
    g.add_edge("report", END)
    return g.compile(checkpointer=checkpointer)


class TestEmbedding:
    def test_parent_receives_the_result_and_the_answer(self, run: Runner) -> None:
        step = ControlledStep(ScriptedBackend(["42"]), policy=Policy(stopping="sc-1", max_samples=1))
        out = run(parent_with(step), user("6 * 7?"))
        assert out.output["report"] == "accepted: 42"
        assert out.output["messages"][-1].content == "42"
        assert out.actions == ["accept"]

    def test_budget_exhaustion_in_the_subgraph_ends_the_step_with_stop(self, run: Runner) -> None:
        # Samples disagree, each refine needs three more, the step may draw five: the refine the
        # first attempt calls for cannot be paid for, so the step stops at once; the parent graph
        # carries on to "report".
        backend = ScriptedBackend(["1", "2", "3"], cycle=True)
        policy = Policy(stopping="sc-3", min_samples=3, max_samples=3, low_confidence=("refine",))
        step = ControlledStep(backend, policy=policy, budget=Budget(samples=5))
        out = run(parent_with(step), user("q"))
        assert out.actions == ["stop"]
        assert len(backend.calls) == 1
        assert out.output["report"] == "stopped: 1"
        result = out.output["result"]
        assert result["usage"]["samples"] == 3
        # 3 samples were used; the refine's 3 more would pass 5: no call was made, so not "spent".
        assert result["reason"].startswith(
            "step 'step' budget 'samples' would be exceeded: 3 estimated for this call + 3 spent > limit 5; "
            "the refine it called for was not started (confidence "
        )

    def test_a_run_ledger_is_shared_by_steps(self, run: Runner) -> None:
        ledger = Ledger(Budget(samples=1))
        backend = ScriptedBackend(["42", "42"])
        policy = Policy(stopping="sc-1", max_samples=1)
        first = run(parent_with(ControlledStep(backend, policy=policy, run_ledger=ledger)), user("a"))
        second = run(parent_with(ControlledStep(backend, policy=policy, run_ledger=ledger)), user("b"))
        assert first.output["report"] == "accepted: 42"
        assert second.output["result"]["status"] == "stopped"
        assert "run budget 'samples'" in second.output["result"]["reason"]

    def test_interrupt_in_the_subgraph_resumes_from_the_parent(self, run: Runner) -> None:
        backend = ScriptedBackend(["1", "2", "3"], cycle=True)
        policy = Policy(
            stopping="sc-3", min_samples=3, max_samples=3, max_refines=0, low_confidence=("ask_user",)
        )
        graph = parent_with(ControlledStep(backend, policy=policy), checkpointer=InMemorySaver())
        config = {"configurable": {"thread_id": "p"}}
        first = run(graph, user("q"), config)
        assert first.interrupted
        out = run(graph, Command(resume={"action": "answer", "answer": "9"}), config)
        assert out.output["report"] == "answered_by_user: 9"
