"""A batch graph with a non-idempotent tool, for the crash tests:
``retryctl batch --graph tests.reliability._crash_graph:make_graph --checkpoints PATH``.

Per task ``plan → tools → finish``. The question is ``charge <task> <amount>...``; ``plan`` writes one
``charge`` call per amount, each with a fresh random id as a model would, so a task that started over
from scratch would get new ids and the tool journal could not recognise its calls: only the
checkpoint of ``plan``'s message keeps them. ``tools`` is a :class:`ControlledToolNode` over ``charge``
(``idempotent: False``) with a :class:`SQLiteToolJournal`. ``finish`` turns the tool messages into the
task's ``result``; its ``answer`` is the JSON object ``{call id: tool message}``.

The checkpoints are the batch's own: ``--checkpoints`` opens an ``AsyncSqliteSaver`` inside the
batch's event loop and passes it to :func:`make_graph`, and the batch invokes the graph with
``durability="sync"`` and the task id as ``run_id``, so a restarted task continues its thread (same
tool-call ids) and a finished one returns its state. Everything else durable lives in the directory
named by ``RETRYCTL_CRASH_DIR``: ``journal.sqlite`` and ``effects.jsonl``, the side effect: one
fsynced line per execution of ``charge``, ``{"task", "call", "exec", "epoch"}``.
``RETRYCTL_CRASH_EPOCH`` (the test's number for this process) goes into each line, and right after
the fsync ``EXEC <task> <call>`` is written to stdout, so a parent can kill the process at a chosen
execution.
"""

from __future__ import annotations

import itertools
import json
import os
import uuid
from typing import Annotated, Any

from langchain_core.messages import AIMessage, ToolMessage
from langchain_core.tools import InjectedToolCallId, tool
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.graph.state import CompiledStateGraph

from retryctl.audit import DecisionLog
from retryctl.exceptions import ConfigError
from retryctl.nodes import ControlledToolNode, SQLiteToolJournal, verdict_of

__all__ = ["DIR_ENV", "EPOCH_ENV", "make_graph"]

DIR_ENV = "RETRYCTL_CRASH_DIR"
"""The directory holding checkpoints, journal and side-effect file."""
EPOCH_ENV = "RETRYCTL_CRASH_EPOCH"
"""Which start of the batch this process is (written into every side-effect line)."""

_executions = itertools.count()


class State(MessagesState):
    """The graph's state."""

    result: dict[str, Any] | None


def _state_dir() -> str:
    path = os.environ.get(DIR_ENV, "")
    if not path or not os.path.isdir(path):
        raise ConfigError(field=DIR_ENV, value=path, problem="must name an existing directory")
    return path


@tool
def charge(task: str, amount: int, tool_call_id: Annotated[str, InjectedToolCallId]) -> str:
    """Charge ``amount`` for ``task``: not idempotent, it must never run twice for one call."""
    exec_id = f"{os.environ.get(EPOCH_ENV, '?')}.{os.getpid()}.{next(_executions)}"
    line = {"task": task, "call": tool_call_id, "exec": exec_id, "epoch": os.environ.get(EPOCH_ENV)}
    fd = os.open(os.path.join(_state_dir(), "effects.jsonl"), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (json.dumps(line) + "\n").encode())
        os.fsync(fd)
    finally:
        os.close(fd)
    # One write below PIPE_BUF, so the line never interleaves with the CLI's own output.
    os.write(1, f"EXEC {task} {tool_call_id}\n".encode())
    return f"charged {amount} exec={exec_id}"


charge.metadata = {"idempotent": False}


def _plan(state: State) -> dict[str, Any]:
    words = str(state["messages"][0].content).split()
    if len(words) < 3 or words[0] != "charge":
        raise ValueError(f"expected 'charge <task> <amount>...', got {' '.join(words)!r}")
    calls = [
        {
            "name": "charge",
            "args": {"task": words[1], "amount": int(a)},
            "id": f"call_{uuid.uuid4().hex[:12]}",
        }
        for a in words[2:]
    ]
    return {"messages": [AIMessage("", tool_calls=calls)]}


def _finish(state: State) -> dict[str, Any]:
    messages = state["messages"]
    last_ai = max(i for i, m in enumerate(messages) if isinstance(m, AIMessage))
    replies = [m for m in messages[last_ai + 1 :] if isinstance(m, ToolMessage)]
    # retryctl's record, or none for a first-try accept left as the tool returned it.
    actions = [(verdict_of(m) or {"action": "accept"})["action"] for m in replies]
    ok = bool(replies) and all(a == "accept" for a in actions)
    return {
        "result": {
            "status": "accepted" if ok else "stopped",
            "answer": json.dumps({m.tool_call_id: m.content for m in replies}, sort_keys=True),
            "confidence": 1.0 if ok else 0.0,
            "reason": "every charge accepted" if ok else f"tool verdicts {actions}",
            "usage": {"calls": len(replies)},
        }
    }


def make_graph(
    log: DecisionLog | None = None, checkpointer: BaseCheckpointSaver[Any] | None = None
) -> CompiledStateGraph[State, None, State, State]:
    """The crash-test graph over the state in ``$RETRYCTL_CRASH_DIR``, logging verdicts to ``log``."""
    if checkpointer is None:
        # Without checkpoints a restarted task would plan again: the test would prove nothing.
        raise ConfigError(field="checkpointer", value=None, problem="run the crash graph with --checkpoints")
    state_dir = _state_dir()
    tools = ControlledToolNode(
        [charge], log=log, journal=SQLiteToolJournal(os.path.join(state_dir, "journal.sqlite"))
    )
    builder = StateGraph(State)
    builder.add_node("plan", _plan)
    builder.add_node("tools", tools)
    builder.add_node("finish", _finish)
    builder.add_edge(START, "plan")
    builder.add_edge("plan", "tools")
    builder.add_edge("tools", "finish")
    builder.add_edge("finish", END)
    return builder.compile(checkpointer=checkpointer)
