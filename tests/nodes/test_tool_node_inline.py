"""InlineToolNode (ControlledToolNode's base): a step's single tool call runs in the calling thread.

It overrides ToolNode's private ``_func``; these tests pin it to the installed langgraph, so an upgrade
that changes ``ToolRuntime`` or the single-call path fails here rather than in a user's graph.
"""

from __future__ import annotations

import asyncio
import contextvars
import dataclasses
import threading
from typing import Any

from langchain_core.messages import AIMessage, ToolMessage
from langchain_core.tools import tool
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode
from langgraph.prebuilt.tool_node import ToolRuntime

from retryctl.nodes import ControlledToolNode
from retryctl.nodes._tool_inline import RUNTIME_FIELDS, InlineToolNode

MARK: contextvars.ContextVar[str] = contextvars.ContextVar("mark", default="unset")


def graph_of(node: ToolNode) -> Any:
    g = StateGraph(MessagesState)
    g.add_node("tools", node)
    g.add_edge(START, "tools")
    g.add_edge("tools", END)
    return g.compile()


def calls(n: int) -> dict[str, Any]:
    tool_calls = [{"name": "where", "args": {"tag": f"t{i}"}, "id": f"c{i}"} for i in range(n)]
    return {"messages": [AIMessage(content="", tool_calls=tool_calls, id="ai-1")]}


class Seen:
    """A tool that records the thread it ran in and the runtime it was given."""

    def __init__(self) -> None:
        self.threads: list[int] = []
        self.runtimes: list[ToolRuntime] = []

        @tool
        def where(tag: str, runtime: ToolRuntime) -> str:
            """Say where this ran."""
            self.threads.append(threading.get_ident())
            self.runtimes.append(runtime)
            MARK.set(tag)  # must not leak into the caller's context
            return tag

        self.tool = where


class TestInlineToolNode:
    def test_it_fills_every_field_of_the_installed_tool_runtime(self) -> None:
        assert {f.name for f in dataclasses.fields(ToolRuntime)} == RUNTIME_FIELDS

    def test_the_runtime_is_the_one_toolnode_builds(self) -> None:
        plain, inline = Seen(), Seen()
        graph_of(ToolNode([plain.tool])).invoke(calls(1), {"configurable": {"thread_id": "x"}})
        graph_of(InlineToolNode([inline.tool])).invoke(calls(1), {"configurable": {"thread_id": "x"}})
        [a], [b] = plain.runtimes, inline.runtimes
        for name in ("state", "tool_call_id", "context", "store", "server_info"):
            assert getattr(a, name) == getattr(b, name), name
        # The same step's execution info, but of another run (its checkpoint, task and time differ).
        ea, eb = a.execution_info, b.execution_info
        assert ea is not None and eb is not None
        assert (ea.thread_id, ea.checkpoint_ns.split(":")[0]) == (
            eb.thread_id,
            eb.checkpoint_ns.split(":")[0],
        )
        assert [t.name for t in a.tools] == [t.name for t in b.tools]
        assert a.config["configurable"]["thread_id"] == b.config["configurable"]["thread_id"] == "x"
        assert callable(b.stream_writer)

    def test_a_single_call_runs_in_the_calling_thread_and_its_context_does_not_leak(self) -> None:
        seen = Seen()
        out = graph_of(InlineToolNode([seen.tool])).invoke(calls(1))
        assert seen.threads == [threading.get_ident()]
        assert MARK.get() == "unset"
        assert [m.content for m in out["messages"] if isinstance(m, ToolMessage)] == ["t0"]

    def test_several_calls_keep_toolnodes_thread_pool(self) -> None:
        seen = Seen()
        out = graph_of(InlineToolNode([seen.tool])).invoke(calls(3))
        assert threading.get_ident() not in seen.threads
        assert [m.content for m in out["messages"] if isinstance(m, ToolMessage)] == ["t0", "t1", "t2"]

    def test_a_running_event_loop_keeps_the_worker_thread(self) -> None:
        # A sync tool may call asyncio.run(), which a running loop in its thread would forbid.
        seen = Seen()

        async def main() -> None:
            graph_of(InlineToolNode([seen.tool])).invoke(calls(1))

        asyncio.run(main())
        assert seen.threads and seen.threads[0] != threading.get_ident()

    def test_the_async_path_is_toolnodes_own(self) -> None:
        seen = Seen()
        out = asyncio.run(graph_of(InlineToolNode([seen.tool])).ainvoke(calls(1)))
        assert [m.content for m in out["messages"] if isinstance(m, ToolMessage)] == ["t0"]

    def test_controlled_tool_node_is_one(self) -> None:
        assert issubclass(ControlledToolNode, InlineToolNode)
        seen = Seen()
        graph_of(ControlledToolNode([seen.tool])).invoke(calls(1))
        assert seen.threads == [threading.get_ident()]
