"""An agent whose budget runs out mid-task, for the tests of a run's spend carried across a resume.

The model is scripted and stateless (it answers from the messages it is given, so any process can
take the run over): it looks up items 1, 2, 3, ... one tool call at a time, then answers. Item 1's
result is empty, which fails the ``non_empty`` check; with no refine allowed the controller asks the
user about it. Every lookup that runs appends its item to a file, so a test sees which ran, in which
process.

With ``Budget(attempts=6)`` one uninterrupted run goes: model call 1, lookup 1 (2; asks), model call 3,
lookup 2 (4), model call 5, lookup 3 (6); the next model call is refused and the agent stops saying
the attempts budget is spent.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from langchain.agents import create_agent
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.runnables import Runnable
from langchain_core.tools import BaseTool, tool
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.graph.state import CompiledStateGraph
from langgraph.types import Command

from retryctl.controller import Budget, Policy, ValidatorResult
from retryctl.middleware import RetryController
from retryctl.nodes import ToolJournal

CONFIG: Any = {"configurable": {"thread_id": "lookups-1"}}
ITEMS = 5


class Looker(BaseChatModel):
    """Looks up the next item until it has ``ITEMS`` results, then answers."""

    def _generate(
        self, messages: list[BaseMessage], stop: list[str] | None = None, run_manager: Any = None, **kw: Any
    ) -> ChatResult:
        done = sum(isinstance(m, ToolMessage) for m in messages)
        if done >= ITEMS:
            message = AIMessage(f"looked up {done} items")
        else:
            n = done + 1
            message = AIMessage("", tool_calls=[{"name": "lookup", "args": {"n": n}, "id": f"c{n}"}])
        return ChatResult(generations=[ChatGeneration(message=message)])

    def bind_tools(self, tools: Any, **kwargs: Any) -> Runnable[Any, BaseMessage]:  # type: ignore[override]
        return self

    @property
    def _llm_type(self) -> str:
        return "looker"


def lookup_tool(ran: Path) -> BaseTool:
    """``lookup(n)``: item 1's record is empty; each run is appended to ``ran``."""

    @tool
    def lookup(n: int) -> str:
        """Look an item up."""
        with ran.open("a") as f:
            f.write(f"{n}\n")
        return "" if n == 1 else f"item {n}"

    return lookup


def non_empty(content: str, args: dict[str, Any]) -> ValidatorResult:
    return ValidatorResult("non_empty", bool(content), "the lookup returned nothing")


def build(
    checkpointer: BaseCheckpointSaver[Any],
    ran: Path,
    *,
    attempts: int,
    journal: ToolJournal | None,
    **settings: Any,
) -> tuple[CompiledStateGraph[Any, Any, Any, Any], RetryController]:
    """The agent and its controller; ``settings`` are more (or other) ``RetryController`` keywords."""
    given: dict[str, Any] = {
        "policy": Policy(weights={"validators": 1.0}, max_refines=0),  # ask at once
        "validators": {"lookup": [non_empty]},
        "budget": Budget(attempts=attempts),
        "journal": journal,
    }
    controller = RetryController(**(given | settings))
    agent = create_agent(
        Looker(), tools=[lookup_tool(ran)], middleware=[controller], checkpointer=checkpointer
    )
    return agent, controller


def transcript(out: dict[str, Any]) -> list[list[str]]:
    return [[type(m).__name__, str(m.content)] for m in out["messages"]]


def main() -> None:
    """``python -m tests.middleware._lookups MODE DB RAN ATTEMPTS JOURNAL``: ``start`` runs until the
    question, ``resume`` answers it (accept), ``both`` does the two in this one process; ``JOURNAL``
    is ``sqlite`` (in ``DB``) or ``memory``. Prints the interrupts, the transcript and the record."""
    from langgraph.checkpoint.sqlite import SqliteSaver

    from retryctl.nodes import MemoryToolJournal, SQLiteToolJournal

    mode, db, ran, attempts, kind = sys.argv[1:6]
    journal = SQLiteToolJournal(db) if kind == "sqlite" else MemoryToolJournal()
    with SqliteSaver.from_conn_string(db) as saver:
        agent, _ = build(saver, Path(ran), attempts=int(attempts), journal=journal)
        interrupts = []
        if mode in ("start", "both"):
            out = agent.invoke({"messages": [("user", "look up the items")]}, CONFIG)
            interrupts = [i.value for i in out.get("__interrupt__", ())]
        if mode in ("resume", "both"):
            out = agent.invoke(Command(resume={"action": "accept"}), CONFIG)
            interrupts = [i.value for i in out.get("__interrupt__", ())]
        record = agent.get_state(CONFIG).values["retryctl_run"]
        print(json.dumps({"interrupts": interrupts, "messages": transcript(out), "record": record}))


if __name__ == "__main__":
    main()
