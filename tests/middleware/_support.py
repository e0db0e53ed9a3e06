"""Agents for the middleware tests: ``create_agent`` with a scripted model, run sync or async."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from langchain.agents import create_agent
from langchain_core.messages import AIMessage, AnyMessage, ToolMessage
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver

from retryctl.middleware import RUN_KEY, RetryController, Run


@tool
def multiply(a: float, b: float) -> float:
    """Multiply two numbers."""
    return a * b


@tool
def multiply_backup(a: float, b: float) -> float:
    """Multiply two numbers (a second implementation)."""
    return a * b


class Agent:
    """An agent under test: invoked sync (``mode="sync"``) or async, on one thread of a checkpointer."""

    def __init__(self, model: Any, tools: list[Any], controller: RetryController, mode: str, **kw: Any):
        self.controller = controller
        self.mode = mode
        self.graph = create_agent(
            model, tools=tools, middleware=[controller], checkpointer=InMemorySaver(), **kw
        )
        self.config: RunnableConfig = {"configurable": {"thread_id": "t1"}}

    def invoke(self, value: Any) -> dict[str, Any]:
        if self.mode == "sync":
            out: dict[str, Any] = self.graph.invoke(value, self.config)
            return out
        return asyncio.run(self.graph.ainvoke(value, self.config))

    def ask(self, question: str) -> dict[str, Any]:
        return self.invoke({"messages": [("user", question)]})

    def run(self) -> Run:
        """The ledger and counts of the latest run on the thread."""
        run_id = self.graph.get_state(self.config).values[RUN_KEY]
        found = self.controller.run(run_id)
        assert found is not None
        return found


def no_wait(seconds: float) -> None:
    """A sleep that records nothing and waits for nothing."""


async def ano_wait(seconds: float) -> None:
    """The async twin of :func:`no_wait`."""


def tool_messages(out: dict[str, Any]) -> list[ToolMessage]:
    return [m for m in out["messages"] if isinstance(m, ToolMessage)]


def last_ai(out: dict[str, Any]) -> AIMessage:
    messages: list[AnyMessage] = out["messages"]
    found = next(m for m in reversed(messages) if isinstance(m, AIMessage))
    return found


def records(path: Path) -> list[dict[str, Any]]:
    """The decision log's records, in order."""
    return [json.loads(line) for line in path.read_text().splitlines()]
