"""ControlledToolNode's ``ask_user``: each reply reaches the tool call that asked, whatever the order the
calls run in, and a call that asks twice gets its second answer the second time."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

import pytest
from langchain_core.messages import AIMessage, HumanMessage
from langchain_core.tools import BaseTool, tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.types import Command

from retryctl.controller import Policy
from retryctl.nodes import ControlledToolNode, MemoryToolJournal, SQLiteToolJournal, sqlite_checkpointer
from retryctl.testing import CapturedRun, capture_verdicts
from tests.nodes._support import Runner, StreamingToolNode
from tests.nodes.test_tool_node import graph_of, non_negative, tool_messages

ASKS = Policy(weights={"validators": 1.0}, max_refines=0)  # a rejected result is asked about at once
EXTEND = {"action": "extend", "budget": {"attempts": 1}}
CONFIG = {"configurable": {"thread_id": "t"}}


def turn(*expressions: str) -> dict[str, Any]:
    """One model message calling ``subtract`` once per expression, with ids ``call-0``, ``call-1``..."""
    calls = [
        {"name": "subtract", "args": {"expression": e}, "id": f"call-{i}"} for i, e in enumerate(expressions)
    ]
    return {"messages": [HumanMessage("go"), AIMessage(content="", tool_calls=calls)]}


class Subtract:
    """A tool whose results the ``non_negative`` validator rejects; ``slow`` calls take a while, so that
    without per-call matching a sibling would reach its question first."""

    def __init__(self, slow: frozenset[str] = frozenset()) -> None:
        self.log: list[str] = []
        self.slow = slow

    def tool(self) -> BaseTool:
        @tool
        def subtract(expression: str) -> str:
            """Evaluate a subtraction."""
            self.log.append(expression)
            if expression in self.slow:
                time.sleep(0.2)
            left, right = expression.split("-")
            return str(int(left) - int(right))

        return subtract


class SlowJournal(MemoryToolJournal):
    """A journal that is slow to read one call's records: that call reaches its question last."""

    def __init__(self, slow_call: str) -> None:
        super().__init__()
        self.slow_call = slow_call

    def get(self, key: str) -> dict[str, Any] | None:
        if key.endswith(f"/{self.slow_call}"):
            time.sleep(0.2)
        return super().get(key)


def racing_node(tools: Subtract) -> ControlledToolNode:
    """A node on which ``call-0`` reaches its question last, both in a first run and after a resume."""
    return StreamingToolNode(
        [tools.tool()], validators={"subtract": [non_negative]}, policy=ASKS, journal=SlowJournal("call-0")
    )


Reply = dict[str, Any] | str


def answer_all(
    run: Callable[..., CapturedRun],
    graph: Any,
    first: CapturedRun,
    script: Mapping[str, list[Reply]],
    *,
    by_id: bool = False,
) -> tuple[CapturedRun, list[str]]:
    """Answer every interrupt from ``script`` (replies per tool-call id, in order) until the run ends;
    return the last run and the tool-call ids asked about, in order."""
    pending = {call: list(replies) for call, replies in script.items()}
    asked: list[str] = []
    out = first
    while out.interrupted:
        assert len(out.interrupts) == 1  # one question at a time: a plain Command(resume=...) answers it
        [question] = out.interrupts
        call = question.value["tool_call_id"]
        asked.append(call)
        reply = pending[call].pop(0)
        out = run(graph, Command(resume={question.id: reply} if by_id else reply), CONFIG)
        assert len(asked) < 10, asked
    assert all(not left for left in pending.values()), pending
    return out, asked


def contents(out: CapturedRun) -> dict[str, Any]:
    return {m.tool_call_id: m.content for m in tool_messages(out)}


class TestSiblingsAskInOneStep:
    @pytest.mark.parametrize("by_id", [False, True], ids=["plain", "by-interrupt-id"])
    def test_each_call_gets_its_own_answer(self, run: Runner, by_id: bool) -> None:
        tools = Subtract(slow=frozenset({"2-7"}))
        node = racing_node(tools)
        graph = graph_of(node, InMemorySaver())
        first = run(graph, turn("2-7", "3-8"), CONFIG)
        out, asked = answer_all(run, graph, first, {"call-0": ["100"], "call-1": ["200"]}, by_id=by_id)
        assert asked == ["call-0", "call-1"]  # in the order of the model's calls, not of the threads
        assert contents(out) == {"call-0": "100", "call-1": "200"}
        assert sorted(tools.log) == ["2-7", "3-8"]  # each tool ran once

    def test_the_question_names_its_call(self, run: Runner) -> None:
        node = StreamingToolNode([Subtract().tool()], validators={"subtract": [non_negative]}, policy=ASKS)
        first = run(graph_of(node, InMemorySaver()), turn("2-7", "3-8"), CONFIG)
        [question] = first.interrupts
        assert question.value["tool_call_id"] == "call-0"
        assert question.value["step_id"] == "tool:subtract:call-0"
        assert "'2-7'" in question.value["question"]

    def test_a_call_that_asks_twice_between_its_siblings_answers(self, run: Runner) -> None:
        tools = Subtract(slow=frozenset({"2-7"}))
        node = racing_node(tools)
        graph = graph_of(node, InMemorySaver())
        first = run(graph, turn("2-7", "3-8", "4-9"), CONFIG)
        script: dict[str, list[Reply]] = {
            "call-0": [EXTEND, "100"],
            "call-1": [EXTEND, {"action": "accept"}],
            "call-2": ["300"],
        }
        out, asked = answer_all(run, graph, first, script)
        assert asked == ["call-0", "call-0", "call-1", "call-1", "call-2"]
        assert contents(out) == {"call-0": "100", "call-1": "-5", "call-2": "300"}
        assert sorted(tools.log) == ["2-7", "2-7", "3-8", "3-8", "4-9"]  # one extra attempt per extend

    def test_answers_survive_a_new_process(self, tmp_path: Any) -> None:
        # Checkpoints and journal in SQLite; every resume builds a fresh node and graph, as another
        # process would, so nothing of the matching lives in memory.
        path = str(tmp_path / "run.sqlite")
        tools = Subtract()

        def graph() -> Any:
            node = StreamingToolNode(
                [tools.tool()],
                validators={"subtract": [non_negative]},
                policy=ASKS,
                journal=SQLiteToolJournal(path),
            )
            return graph_of(node, sqlite_checkpointer(path))

        script: dict[str, list[Reply]] = {"call-0": [EXTEND, "100"], "call-1": ["200"]}
        out, asked = answer_all(
            lambda _g, input, config: capture_verdicts(graph(), input, config),
            None,
            capture_verdicts(graph(), turn("2-7", "3-8"), CONFIG),
            script,
        )
        assert asked == ["call-0", "call-0", "call-1"]
        assert contents(out) == {"call-0": "100", "call-1": "200"}
        assert sorted(tools.log) == ["2-7", "2-7", "3-8"]


class TestOneCallAsksTwice:
    def test_the_second_question_gets_the_second_answer(self, run: Runner) -> None:
        tools = Subtract()
        node = StreamingToolNode([tools.tool()], validators={"subtract": [non_negative]}, policy=ASKS)
        graph = graph_of(node, InMemorySaver())
        assert run(graph, turn("2-7"), CONFIG).actions == ["ask_user"]
        again = run(graph, Command(resume=EXTEND), CONFIG)
        # The extension is logged, and the extra attempt is rejected too: asked again.
        assert again.actions == ["retry", "ask_user"]
        assert [r["reply"]["action"] for r in again.replies] == ["extend"]
        done = run(graph, Command(resume="7"), CONFIG)
        # Only the second answer's verdict: no attempt and no verdict replayed from the first answer.
        assert done.actions == ["accept"] and done.verdicts[0]["target"] == "user"
        assert [r["reply"] for r in done.replies] == [{"action": "answer", "answer": "7", "budget": {}}]
        assert contents(done) == {"call-0": "7"}
        assert tools.log == ["2-7", "2-7"]

    def test_a_bad_reply_is_asked_again_with_the_error(self, run: Runner) -> None:
        node = StreamingToolNode([Subtract().tool()], validators={"subtract": [non_negative]}, policy=ASKS)
        graph = graph_of(node, InMemorySaver())
        run(graph, turn("2-7", "3-8"), CONFIG)
        bad = run(graph, Command(resume={"action": "extend"}), CONFIG)
        [question] = bad.interrupts
        assert question.value["tool_call_id"] == "call-0"
        assert "needs a 'budget'" in question.value["error"]
        out, asked = answer_all(run, graph, bad, {"call-0": ["100"], "call-1": ["200"]})
        assert asked == ["call-0", "call-1"]
        assert contents(out) == {"call-0": "100", "call-1": "200"}
