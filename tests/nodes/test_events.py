"""The run id of every record: LangGraph's run id, else the thread, else one drawn per invocation; never
a constant, so unrelated runs never merge in ``retryctl audit --why``."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path
from typing import Any

from langchain_core.messages import AIMessage, HumanMessage
from langgraph.graph import END, START, MessagesState, StateGraph

from retryctl.audit import DecisionLog, VerdictRecord, read_records
from retryctl.controller import Policy
from retryctl.nodes import ControlledStep, ControlledToolNode
from retryctl.testing import ScriptedBackend
from tests.nodes._support import Sleeps, user
from tests.nodes.test_tool_node import Calls, graph_of

ONE: dict[str, Any] = {"stopping": "sc-1", "min_samples": 1, "max_samples": 1}


def step(log: DecisionLog, step_id: str = "solve") -> Any:
    """The compiled step: a transient fault, then an answer, so two verdicts (retry, accept) per run."""
    backend = ScriptedBackend([TimeoutError("slow"), "42"], cycle=True)
    built = ControlledStep(backend, policy=Policy(**ONE), log=log, step_id=step_id, sleep=lambda _s: None)
    return built.compile()


def run_ids(path: Path) -> list[str]:
    return [r.run_id for r in read_records(path) if isinstance(r, VerdictRecord)]


class TestRunIdFromConfig:
    def test_configurable_run_id_comes_first(self, tmp_path: Path) -> None:
        path = tmp_path / "log.jsonl"
        with DecisionLog(path) as log:
            config = {"run_id": uuid.uuid4(), "configurable": {"run_id": "task-7", "thread_id": "t"}}
            step(log).invoke(user("q"), config)
        assert run_ids(path) == ["task-7", "task-7"]

    def test_the_run_id_given_to_invoke_is_used(self, tmp_path: Path) -> None:
        path = tmp_path / "log.jsonl"
        given = uuid.uuid4()
        with DecisionLog(path) as log:
            step(log).invoke(user("q"), {"run_id": given, "configurable": {"thread_id": "t"}})
        assert run_ids(path) == [str(given), str(given)]

    def test_else_the_thread_id(self, tmp_path: Path) -> None:
        path = tmp_path / "log.jsonl"
        with DecisionLog(path) as log:
            step(log).invoke(user("q"), {"configurable": {"thread_id": "thread-3"}})
        assert run_ids(path) == ["thread-3", "thread-3"]

    def test_else_one_fresh_id_per_invocation(self, tmp_path: Path) -> None:
        path = tmp_path / "log.jsonl"
        with DecisionLog(path) as log:
            graph = step(log)
            graph.invoke(user("q"))
            asyncio.run(graph.ainvoke(user("q")))
        first, second = run_ids(path)[:2], run_ids(path)[2:]
        assert len(set(first)) == 1 and len(set(second)) == 1  # one id within a run...
        assert first[0] != second[0]  # ...and another for the next run
        assert all(uuid.UUID(r) for r in first + second)

    def test_subgraphs_of_one_invocation_share_its_id(self, tmp_path: Path) -> None:
        path = tmp_path / "log.jsonl"
        with DecisionLog(path) as log:
            parent = StateGraph(MessagesState)
            parent.add_node("a", step(log, "a"))
            parent.add_node("b", step(log, "b"))
            parent.add_edge(START, "a")
            parent.add_edge("a", "b")
            parent.add_edge("b", END)
            app: Any = parent.compile()
            app.invoke(user("q"))
            app.invoke(user("q"))
        ids = run_ids(path)
        assert len(ids) == 8
        assert len(set(ids[:4])) == 1 and len(set(ids[4:])) == 1 and ids[0] != ids[4]

    def test_a_tool_nodes_calls_share_the_id_of_their_invocation(self, tmp_path: Path) -> None:
        path = tmp_path / "log.jsonl"
        calls = [{"name": "calculator", "args": {"expression": "6*7"}, "id": f"c{i}"} for i in range(2)]
        state = {"messages": [HumanMessage("go"), AIMessage("", tool_calls=calls)]}
        with DecisionLog(path) as log:
            sleeps = Sleeps()
            tools = [Calls().calculator(faults=[TimeoutError("slow")])]
            node = ControlledToolNode(tools, log=log, sleep=sleeps, asleep=sleeps.asleep)
            graph: Any = graph_of(node)
            graph.invoke(state)  # two calls in parallel threads: one id
            asyncio.run(graph.ainvoke(state))
        ids = run_ids(path)
        assert len(ids) == 5  # a retry and two accepts, then two accepts
        assert len(set(ids[:3])) == 1 and len(set(ids[3:])) == 1 and ids[0] != ids[3]
        assert "run" not in ids


class TestDrawnRunIds:
    def test_drawn_ids_are_distinct_version_4_uuids(self) -> None:
        from retryctl.nodes._events import new_run_id

        ids = [new_run_id() for _ in range(10_000)]
        assert len(set(ids)) == len(ids)
        assert {uuid.UUID(i).version for i in ids} == {4}
        # The text str(UUID) gives (lower-case, dashed) and the RFC 4122 variant, as uuid4() has.
        assert all(str(uuid.UUID(i)) == i and uuid.UUID(i).variant == uuid.RFC_4122 for i in ids)

    def test_a_forked_child_does_not_repeat_its_parents_ids(self) -> None:
        import os

        from retryctl.nodes._events import new_run_id

        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: its next id, to the parent
            os.close(read)
            os.write(write, new_run_id().encode())
            os._exit(0)
        os.close(write)
        parents = new_run_id()
        with os.fdopen(read) as pipe:
            childs = pipe.read()
        os.waitpid(pid, 0)
        assert uuid.UUID(childs) and childs != parents
