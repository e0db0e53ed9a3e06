"""Real LangGraph graphs for the batch tests, named with ``--graph tests.batch._graphs:<factory>``.

Each is a parent graph ``gate → solve`` where ``solve`` is a real :class:`ControlledStep` over
:class:`ScriptedBackend` models that answer from the question, so verdicts, budgets and results are
the controller's own. The question's first word picks the behaviour:

- ``add A B``: every sample says ``A + B``: accepted;
- ``hard ...``: the samples disagree, so the step spends its whole samples budget and stops;
- ``flaky ...``: the gate raises ``ConnectionError`` on the first try of each task (an
  infrastructure failure outside the controller), then passes;
- ``pair ...``: two such tasks must run at the same time (an ``asyncio.Barrier`` of 2), so a batch
  with concurrency 1 cannot finish them;
- ``hang ...``: with ``RETRYCTL_TEST_HANG=1`` the gate prints ``HANG <question>`` to stdout and blocks
  for ever (a process to kill mid-batch); otherwise it is a hard question;
- ``stall ...``: a hard question; with ``RETRYCTL_TEST_HANG=1`` its fourth sample (the second attempt's
  first, once the first attempt's verdict is logged) prints ``HANG <question>`` and blocks for five
  seconds (a process to interrupt mid-step; a worker thread may run the sample, and Ctrl-C waits for it).

For checkpointing, a graph ``plan → act`` without a controller (:func:`plan_act`, which takes a
``checkpointer``; :func:`plan_act_builder` and :data:`PLAN_ACT`, uncompiled; :data:`PLAN_ACT_COMPILED`,
compiled without one): ``plan`` writes a fresh random plan id, as a model would; ``act`` fails with
``ConnectionError`` on its first N runs for a question ``fail N ...`` and answers with the plan id.
:data:`plans` and :data:`acts` count the runs per question. Given the checkpointer, ``act`` also says
whether ``plan``'s checkpoint was stored before it ran (``reason``: ``plan stored`` or ``plan not
stored``).
"""

from __future__ import annotations

import asyncio
import itertools
import os
import sys
import time
import uuid
from collections import Counter
from typing import Any

from langchain_core.messages import AIMessage
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.graph.state import CompiledStateGraph

from retryctl.audit import DecisionLog
from retryctl.controller import Budget, Policy
from retryctl.nodes import ControlledStep, StepResult
from retryctl.testing import ScriptedBackend

_tries: dict[str, int] = {}
_stalls: Counter[str] = Counter()
_barriers: dict[str, asyncio.Barrier] = {}
_counter = itertools.count()
plans: Counter[str] = Counter()
"""Runs of ``plan`` per question."""
acts: Counter[str] = Counter()
"""Runs of ``act`` per question."""


class State(MessagesState):
    """The parent graph's state."""

    result: StepResult | None


def _question(messages: list[dict[str, Any]]) -> str:
    users = [m for m in messages if m.get("role") == "user"]
    return str(users[0]["content"]) if users else ""


def _answer(messages: list[dict[str, Any]], _params: Any) -> str:
    question = _question(messages)
    words = question.split()
    if words and words[0] == "stall" and os.environ.get("RETRYCTL_TEST_HANG") == "1":
        _stalls[question] += 1
        if _stalls[question] > 3:
            print(f"HANG {question}", flush=True)
            deadline = time.monotonic() + 5  # a worker thread may run it: the batch waits for it on Ctrl-C
            while time.monotonic() < deadline:
                time.sleep(0.05)
    if words and words[0] == "add":
        return f"The answer is {int(words[1]) + int(words[2])}"
    return f"The answer is {next(_counter)}"  # never the same twice: no agreement


async def _gate(state: State) -> dict[str, Any]:
    question = str(state["messages"][0].content)
    kind = question.split(maxsplit=1)[0]
    if kind == "flaky":
        _tries[question] = _tries.get(question, 0) + 1
        if _tries[question] == 1:
            raise ConnectionError("calculation service unreachable")
    elif kind == "pair":
        barrier = _barriers.setdefault("pair", asyncio.Barrier(2))
        await asyncio.wait_for(barrier.wait(), timeout=10)
    elif kind == "hang" and os.environ.get("RETRYCTL_TEST_HANG") == "1":
        print(f"HANG {question}", flush=True)
        await asyncio.Event().wait()
    return {}


def build(log: DecisionLog | None = None) -> Any:
    """The test graph, writing its verdicts to ``log`` when one is given."""
    step = ControlledStep(
        [ScriptedBackend([_answer], model="small", cycle=True)],
        policy=Policy(min_samples=3, max_samples=3, max_refines=5, low_confidence=("refine",)),
        budget=Budget(samples=6),
        log=log,
        step_id="solve",
    )
    graph = StateGraph(State)
    graph.add_node("gate", _gate)
    graph.add_node("solve", step.compile())
    graph.add_edge(START, "gate")
    graph.add_edge("gate", "solve")
    graph.add_edge("solve", END)
    return graph.compile()


class PlanState(MessagesState):
    """The plan/act graph's state."""

    result: dict[str, Any] | None


def _plan(state: PlanState) -> dict[str, Any]:
    plans[str(state["messages"][0].content)] += 1
    return {"messages": [AIMessage(f"plan-{uuid.uuid4().hex[:12]}")]}


def plan_act_builder(checkpointer: BaseCheckpointSaver[Any] | None = None) -> StateGraph[PlanState]:
    """The uncompiled plan/act graph (``checkpointer`` only lets ``act`` look at what is stored)."""

    async def act(state: PlanState, config: RunnableConfig) -> dict[str, Any]:
        question = str(state["messages"][0].content)
        acts[question] += 1
        words = question.split()
        if words[0] == "fail" and acts[question] <= int(words[1]):
            raise ConnectionError("tool service unreachable")
        plan = str(state["messages"][-1].content)
        stored = None
        if checkpointer is not None:
            thread: RunnableConfig = {"configurable": {"thread_id": config["configurable"]["thread_id"]}}
            saved = await checkpointer.aget_tuple(thread)
            messages = saved.checkpoint["channel_values"].get("messages", []) if saved else []
            stored = any(m.content == plan for m in messages)
        reason = {None: "", True: "plan stored", False: "plan not stored"}[stored]
        result = {"status": "accepted", "answer": plan, "confidence": 1.0, "reason": reason, "usage": {}}
        return {"result": result}

    graph = StateGraph(PlanState)
    graph.add_node("plan", _plan)
    graph.add_node("act", act)
    graph.add_edge(START, "plan")
    graph.add_edge("plan", "act")
    graph.add_edge("act", END)
    return graph


def plan_act(
    checkpointer: BaseCheckpointSaver[Any] | None = None,
) -> CompiledStateGraph[PlanState, None, PlanState, PlanState]:
    """The plan/act graph compiled with ``checkpointer``."""
    return plan_act_builder(checkpointer).compile(checkpointer=checkpointer)


PLAN_ACT = plan_act_builder()
"""The plan/act graph, uncompiled."""
PLAN_ACT_COMPILED = plan_act()
"""The plan/act graph, compiled without a checkpointer."""


if __name__ == "__main__":  # pragma: no cover - a manual check
    print(asyncio.run(build().ainvoke({"messages": [("user", sys.argv[1])]})))
