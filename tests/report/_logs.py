"""Decision logs for the report and audit tests, written by real retryctl parts.

:func:`graph_log` runs real :class:`ControlledStep` graphs (scripted backends) with a
:class:`DecisionLog`, one run per question, and then writes each question's summary record with its
gold answer, as an application does when a run ends. :func:`verdict` builds controller verdicts for
logs whose numbers a test needs to choose (threshold hints, black holes), written through the same
real writer. :func:`agent_log` runs a real ``create_agent`` agent under ``RetryController`` (a scripted
chat model whose answers carry known usage), whose records carry the run's shared ledger;
:func:`failover_log` runs one whose primary model is down, so that the controller's default model
breaker opens and later turns skip it (verdicts that charged nothing).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from langchain_core.language_models.fake_chat_models import FakeMessagesListChatModel
from langchain_core.messages import AIMessage
from langchain_core.tools import BaseTool, tool
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.prebuilt import tools_condition

from retryctl.audit import DecisionLog
from retryctl.controller import (
    Action,
    Breaker,
    BreakerConfig,
    Budget,
    Evidence,
    ManualClock,
    Policy,
    PriceTable,
    Verdict,
)
from retryctl.middleware import RetryController
from retryctl.nodes import ControlledStep, ControlledToolNode
from retryctl.testing import ScriptedBackend, capture_verdicts
from tests.middleware._scripted import ScriptedChat, call, say
from tests.middleware._support import Agent, ano_wait, multiply, no_wait

QUESTIONS: list[tuple[str, list[str], list[str], str]] = [
    # run id, the small model's answers, the large model's answers, gold
    ("run-easy", ["42", "42", "42"], ["42"] * 3, "42"),
    ("run-switch", ["41", "42", "40"], ["42"] * 3, "42"),
    ("run-wrong", ["7", "7", "7"], ["7"] * 3, "8"),
    ("run-stuck", ["1", "2", "3"], ["4", "5", "6"], "9"),
]


def graph_log(path: Path, *, samples: int = 3, token_logprobs: bool = False) -> Path:
    """Run every question of :data:`QUESTIONS` through a real ControlledStep, logging to ``path``."""
    with DecisionLog(path) as log:
        for run_id, small_answers, large_answers, gold in QUESTIONS:
            small = ScriptedBackend(
                [f"The answer is {a}" for a in small_answers], model="small", confidence=0.7, cycle=True
            )
            large = ScriptedBackend(
                [f"The answer is {a}" for a in large_answers], model="large", confidence=0.95, cycle=True
            )
            step = ControlledStep(
                [small, large],
                policy=Policy(
                    stopping=f"sc-{samples}",
                    min_samples=samples,
                    max_samples=samples,
                    max_refines=0,
                    low_confidence=("switch",),
                ),
                budget=Budget(samples=2 * samples),
                log=log,
                step_id="solve",
            )
            run = capture_verdicts(
                step.compile(),
                {"messages": [("user", "What is 6 * 7?")]},
                {"configurable": {"thread_id": run_id}},
            )
            result = run.output["result"]
            history: list[Any] = [
                {"answer": a, "token_logprobs": [-0.1, -0.7, -2.3]} if token_logprobs else a
                for a in small_answers
            ]
            log.record_summary(
                run_id=run_id,
                step_id="solve",
                final_answer=result["answer"],
                sampling_history=history,
                budget_used=dict(result["usage"]),
                budget_max={"samples": float(2 * samples)},
                extra={"gold": gold},
            )
    return path


def verdict(
    action: str,
    confidence: float | None,
    *,
    threshold: float = 0.9,
    samples: float = 3,
    limit: float = 40,
    reason: str | None = None,
) -> Verdict:
    """A controller verdict with the given figures."""
    return Verdict(
        action=Action(action),
        reason=reason or f"confidence {confidence} vs threshold {threshold}",
        confidence=confidence,
        answer="x",
        evidence=Evidence(
            thresholds={"accept": threshold},
            budget_used={"samples": samples},
            budget_limit={"samples": limit},
        ),
    )


def write_verdicts(path: Path, rows: Sequence[tuple[str, str, Verdict, str | None]]) -> Path:
    """Log ``(run_id, step_id, verdict, target)`` rows through the real writer."""
    with DecisionLog(path) as log:
        attempts: dict[tuple[str, str], int] = {}
        for run_id, step_id, v, target in rows:
            n = attempts[(run_id, step_id)] = attempts.get((run_id, step_id), 0) + 1
            log.record_verdict(
                v,
                run_id=run_id,
                step_id=step_id,
                attempt=n,
                candidates_summary=None,
                latency_ms=1.0,
                target=target or None,
            )
    return path


def agent_with_tools(model: Any, tools: Any) -> Any:
    """A hand-built ReAct graph: ``model`` answers, ``tools`` (a tool node) runs the calls it makes."""

    def agent(state: MessagesState) -> dict[str, Any]:
        return {"messages": [model.invoke(state["messages"])]}

    graph = StateGraph(MessagesState)
    graph.add_node("agent", agent)
    graph.add_node("tools", tools)
    graph.add_edge(START, "agent")
    graph.add_conditional_edges("agent", tools_condition)
    graph.add_edge("tools", "agent")
    return graph.compile()


def tool_log(path: Path) -> Path:
    """A ReAct-style graph whose calculator is down: the ControlledToolNode switches to a local one."""

    @tool
    def calculator(expression: str) -> str:
        """Evaluate an arithmetic expression on the calculation service."""
        raise ConnectionError("calculation service unreachable")

    @tool
    def local_calculator(a: float, op: str, b: float) -> str:
        """Apply one arithmetic operator to two numbers."""
        return f"{a * b:g}" if op == "*" else f"{a + b:g}"

    def split(args: dict[str, Any]) -> dict[str, Any]:
        left, op, right = args["expression"].split()
        return {"a": float(left), "op": op, "b": float(right)}

    call = {"name": "calculator", "args": {"expression": "6 * 7"}, "id": "call-1"}
    model = FakeMessagesListChatModel(responses=[AIMessage("", tool_calls=[call]), AIMessage("42")])
    with DecisionLog(path) as log:
        tools = ControlledToolNode(
            [calculator],
            groups={"arithmetic": [calculator, local_calculator]},
            adapters={"local_calculator": split},
            breaker=Breaker(BreakerConfig(failure_threshold=1, cooldown_s=60)),
            log=log,
        )

        app = agent_with_tools(model, tools)
        app.invoke({"messages": [("user", "6 * 7?")]}, {"configurable": {"thread_id": "tool-run"}})
    return path


PRICES = PriceTable.of({"scripted": (1.0, 2.0)})  # USD per million tokens, in and out
TOKENS = [(100, 20), (150, 30), (200, 40), (120, 10)]
"""The usage of the model's four answers, in order (a failed call uses none)."""
USD = sum(i * 1.0 + o * 2.0 for i, o in TOKENS) / 1e6
"""What those answers cost at :data:`PRICES`."""


def flaky_tool() -> BaseTool:
    """A tool whose first call fails with a transient fault (a new one each time: its own state)."""
    failures = [ConnectionError("connection reset by peer")]

    @tool
    def lookup(key: str) -> str:
        """Look a key up on a service that drops the first connection."""
        if failures:
            raise failures.pop()
        return f"value of {key}"

    return lookup


def agent_log(path: Path, mode: str = "sync") -> ScriptedChat:
    """Two questions to one agent: five model calls (one fails and is retried), three tool attempts."""
    model = ScriptedChat(
        script=[
            call("multiply", {"a": 6, "b": 7}, "c1", tokens=TOKENS[0]),
            call("lookup", {"key": "unit"}, "c2", tokens=TOKENS[1]),
            ConnectionError("model endpoint reset"),  # retried: one attempt, one sample, no tokens
            say("The answer is 42 units", tokens=TOKENS[2]),
            say("Done", tokens=TOKENS[3]),
        ]
    )
    controller = RetryController(
        budget=Budget(attempts=20), log=path, prices=PRICES, sleep=no_wait, asleep=ano_wait
    )
    agent = Agent(model, [multiply, flaky_tool()], controller, mode)
    agent.ask("What is 6 times 7, in units?")
    agent.ask("Thanks")
    assert controller.log is not None
    controller.log.close()
    return model


BACKUP_TOKENS = [(300, 40), (310, 45), (320, 50), (330, 55), (340, 60)]
"""The usage of the backup model's answers, one per turn of :func:`failover_log`."""


def failover_log(path: Path, mode: str = "sync") -> tuple[ScriptedChat, ScriptedChat]:
    """Five turns of an agent whose primary model times out: the first turn calls it twice (a
    transient fault is retried once), which opens ``RetryController``'s default model breaker, and
    the next four turns skip it (a ``switch`` verdict each, charging nothing) for the backup, which
    answers every turn with :data:`BACKUP_TOKENS` usage. Returns ``(primary, backup)``."""
    primary = ScriptedChat(model_name="primary", script=[TimeoutError("read timed out")] * 2)
    backup = ScriptedChat(
        model_name="backup", script=[say(f"answer {i}", tokens=t) for i, t in enumerate(BACKUP_TOKENS)]
    )
    controller = RetryController(
        fallback_models=[backup],
        log=path,
        prices=PriceTable.of({"backup": (1.0, 2.0)}),
        clock=ManualClock(),  # the breaker's cooldown never ends here: no probe of the primary
        sleep=no_wait,
        asleep=ano_wait,
    )
    agent = Agent(primary, [multiply], controller, mode)
    for i in range(len(BACKUP_TOKENS)):
        agent.ask(f"question {i}")
    assert controller.log is not None
    controller.log.close()
    return primary, backup
