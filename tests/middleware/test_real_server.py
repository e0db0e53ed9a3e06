"""RetryController in ``create_agent`` with ``ChatOpenAI`` against a real llama.cpp server.

What is real here: the agent is ``langchain.agents.create_agent`` with langchain-openai's ``ChatOpenAI``
speaking HTTP to ``python -m llama_cpp.server`` serving the embedded SmolLM2-135M GGUF on 127.0.0.1,
started by the test (the ``llama_server`` fixture of tests/models/conftest.py); the tools are real
LangChain tools; the decision log is a real file, verified by ``retryctl audit`` in a new process.
Nothing is scripted: every model turn is the server's.

How the 135M model's tool calls are made dependable: the test's ``ServerTurns`` middleware (listed after
``RetryController``, so inside it and applied to a fallback model too) names the tool in
``tool_choice``; llama.cpp's server then constrains the reply with a grammar built from the tool's JSON
schema, so the call it returns always fits the tool (which numbers the model picks is its own).
After a tool result the request goes without tools, so the model answers in text. ``ServerTurns``
also gives an empty tool-calling turn a line of text: llama-cpp-python 0.3's server refuses an
assistant message whose content is null (HTTP 500, "Input should be a valid string"), which is how
langchain-openai sends such a turn back.
"""

from __future__ import annotations

import asyncio
import json
import socket
import subprocess
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain.agents.middleware import AgentMiddleware, ModelRequest, ModelResponse
from langchain_core.messages import AIMessage, AnyMessage, HumanMessage, ToolMessage
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import tool
from langchain_openai import ChatOpenAI
from langgraph.checkpoint.memory import InMemorySaver
from pydantic import SecretStr

from retryctl.audit import verify_log
from retryctl.controller import Budget, Policy, default_equivalence
from retryctl.middleware import RUN_KEY, RetryController

# The server fixture (and the GGUF fixture it needs) of tests/models, reused, not copied.
from tests.models.conftest import gguf_path, llama_server, needs_llama  # noqa: F401

RETRYCTL = Path(sys.executable).parent / "retryctl"
QUESTION = "What is 6 times 7? Use the multiply tool."


@tool
def multiply(a: int, b: int) -> int:
    """Multiply two integers on the multiplication service."""
    raise RuntimeError("multiplication service crashed")


@tool
def multiply_backup(a: int, b: int) -> int:
    """Multiply two integers locally."""
    return a * b


class ServerTurns(AgentMiddleware):
    """Make each turn one the server answers dependably (see the module docstring)."""

    def __init__(self, tool_name: str) -> None:
        super().__init__()
        self.tool_name = tool_name

    def wrap_model_call(
        self, request: ModelRequest[Any], handler: Callable[[ModelRequest[Any]], ModelResponse[Any]]
    ) -> ModelResponse[Any]:
        return handler(self._turn(request))

    async def awrap_model_call(
        self,
        request: ModelRequest[Any],
        handler: Callable[[ModelRequest[Any]], Awaitable[ModelResponse[Any]]],
    ) -> ModelResponse[Any]:
        return await handler(self._turn(request))

    def _turn(self, request: ModelRequest[Any]) -> ModelRequest[Any]:
        request = request.override(messages=[_with_text(m) for m in request.messages])
        if isinstance(request.messages[-1], ToolMessage):
            return request.override(tools=[])
        return request.override(tool_choice={"type": "function", "function": {"name": self.tool_name}})


def _with_text(message: AnyMessage) -> AnyMessage:
    if isinstance(message, AIMessage) and message.tool_calls and not message.content:
        names = ", ".join(c["name"] for c in message.tool_calls)
        return message.model_copy(update={"content": f"Calling {names}."})
    return message


def chat(base_url: str) -> ChatOpenAI:
    # The client does not retry by itself: every retry is the controller's, on its ledger and in its log.
    settings: dict[str, Any] = {"temperature": 0, "max_tokens": 48, "timeout": 120, "max_retries": 0}
    return ChatOpenAI(model="smollm2", base_url=base_url, api_key=SecretStr("unused"), **settings)


def closed_port_url() -> str:
    """A /v1 URL on 127.0.0.1 where nothing listens: every request is refused at once."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}/v1"


def no_wait(seconds: float) -> None:
    """Backoff without waiting: the retries still happen and are logged."""


async def ano_wait(seconds: float) -> None:
    """The async twin of :func:`no_wait`."""


def records(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def verdicts(path: Path) -> list[tuple[str, str]]:
    return [(r["target"], r["action"]) for r in records(path) if r.get("kind") == "verdict"]


def audit(path: Path) -> dict[str, Any]:
    """``retryctl audit LOG --json`` in a new process: it verifies the chain and summarises the runs."""
    done = subprocess.run(
        [str(RETRYCTL), "audit", str(path), "--json"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    summary: dict[str, Any] = json.loads(done.stdout)
    return summary


def run_agent(
    controller: RetryController, model: Any, tool_: Any, mode: str = "sync"
) -> tuple[dict[str, Any], Any]:
    """Ask the question of an agent with one tool, which the server is told to call (``invoke``, or
    ``ainvoke`` when ``mode`` is ``"async"``); the output and the run (its ledger)."""
    turns = ServerTurns(tool_.name)
    middleware: list[Any] = [controller, turns]
    agent = create_agent(model, tools=[tool_], middleware=middleware, checkpointer=InMemorySaver())
    config: RunnableConfig = {"configurable": {"thread_id": "real-server"}}
    question: Any = {"messages": [HumanMessage(QUESTION)]}
    run_once = agent.ainvoke(question, config) if mode == "async" else None
    out: dict[str, Any] = asyncio.run(run_once) if run_once else agent.invoke(question, config)
    run = controller.run(agent.get_state(config).values[RUN_KEY])
    assert run is not None
    return out, run


def assert_one_ledger(out: dict[str, Any], run: Any) -> None:
    """The run's one ledger holds the tokens the server reported for every answer of the run, and an
    attempt for every model call and every tool call that ran (a failed one included)."""
    used = run.ledger.snapshot().used
    usages = [m.usage_metadata for m in out["messages"] if isinstance(m, AIMessage) and m.usage_metadata]
    assert len(usages) == 2
    assert used["input_tokens"] == sum(u["input_tokens"] for u in usages) > 0
    assert used["output_tokens"] == sum(u["output_tokens"] for u in usages) > 0
    assert used["attempts"] == run.model_calls + run.tool_calls
    assert run.tool_calls >= 1


def tool_messages(out: dict[str, Any]) -> list[ToolMessage]:
    return [m for m in out["messages"] if isinstance(m, ToolMessage)]


@pytest.fixture
def server_url(request: pytest.FixtureRequest) -> str:
    """The /v1 URL of the session's ``python -m llama_cpp.server`` (tests/models/conftest.py)."""
    return str(request.getfixturevalue("llama_server"))


@needs_llama
class TestRetryControllerOnLlamaServer:
    def test_a_failing_tool_switches_to_its_groups_backup(
        self, server_url: str, tmp_path: Path, mode: str
    ) -> None:
        log = tmp_path / "decisions.jsonl"
        controller = RetryController(
            groups={"arithmetic": [multiply, multiply_backup]},
            log=log,
            budget=Budget(attempts=12),
            sleep=no_wait,
            asleep=ano_wait,
        )
        out, run = run_agent(controller, chat(server_url), multiply, mode)

        (asked,) = [m for m in out["messages"] if isinstance(m, AIMessage) and m.tool_calls]
        (tool_call,) = asked.tool_calls
        assert tool_call["name"] == "multiply"  # the server's own call, shaped by the tool's schema
        a, b = tool_call["args"]["a"], tool_call["args"]["b"]
        assert isinstance(a, int) and isinstance(b, int)
        (result,) = tool_messages(out)
        assert result.status == "success"
        assert result.response_metadata["retryctl"]["served_by"] == "multiply_backup"
        assert result.content == str(a * b)  # computed by the backup from the server's arguments
        final = out["messages"][-1]
        assert isinstance(final, AIMessage) and not final.tool_calls and str(final.content).strip()

        seen = verdicts(log)
        assert ("multiply", "switch") in seen and ("multiply_backup", "accept") in seen
        # One ledger for the run: both model calls to the server and both tool calls.
        assert (run.model_calls, run.tool_calls) == (2, 2)
        assert_one_ledger(out, run)
        assert verify_log(log).ok
        assert audit(log)

    def test_a_budget_of_one_attempt_stops_with_a_tool_message_naming_it(
        self, server_url: str, tmp_path: Path
    ) -> None:
        log = tmp_path / "decisions.jsonl"
        controller = RetryController(log=log, budget=Budget(attempts=1), sleep=no_wait, interactive=False)
        out, run = run_agent(controller, chat(server_url), multiply_backup)

        (stopped,) = tool_messages(out)
        assert stopped.status == "error"
        assert "retryctl stopped this tool call" in str(stopped.content)
        assert "budget 'attempts' is spent (1 of 1)" in str(stopped.content)
        final = out["messages"][-1]
        assert isinstance(final, AIMessage) and "'attempts'" in str(final.content)
        # The one attempt was the model call to the server; the tool never ran.
        assert run.ledger.snapshot().used["attempts"] == 1
        assert ("multiply_backup", "stop") in verdicts(log)
        assert verify_log(log).ok
        assert audit(log)

    def test_one_ledger_and_log_span_a_dead_primary_its_fallback_and_the_tools(
        self, server_url: str, tmp_path: Path
    ) -> None:
        """The agent's own model is an endpoint that refuses every connection; the controller retries it,
        then switches to the fallback model, the real server, which calls the tool."""
        log = tmp_path / "decisions.jsonl"
        controller = RetryController(
            fallback_models=[chat(server_url)], log=log, budget=Budget(attempts=16), sleep=no_wait
        )
        out, run = run_agent(controller, chat(closed_port_url()), multiply_backup)

        (asked,) = [m for m in out["messages"] if isinstance(m, AIMessage) and m.tool_calls]
        (tool_call,) = asked.tool_calls  # made by the fallback: the primary never answered
        (result,) = tool_messages(out)
        assert result.status == "success"
        assert result.content == str(tool_call["args"]["a"] * tool_call["args"]["b"])
        final = out["messages"][-1]
        assert isinstance(final, AIMessage) and str(final.content).strip()
        entries = [r for r in records(log) if r.get("kind") == "verdict"]
        assert len({r["run_id"] for r in entries}) == 1  # model and tool verdicts: one run in the log
        targets = {r["target"] for r in entries}
        assert "multiply_backup" in targets and len(targets) == 3  # the tool and both models
        actions = [r["action"] for r in entries]
        assert "retry" in actions and "switch" in actions  # the dead primary: retried, then left
        assert run.model_calls > 2 and run.tool_calls == 1
        assert_one_ledger(out, run)
        assert verify_log(log).ok
        summary = audit(log)
        assert summary

    def test_sample_final_returns_a_draw_of_the_accepted_answer(
        self, server_url: str, tmp_path: Path
    ) -> None:
        """Free answers at temperature 1 from the real server, sampled: whatever the draws, an accepted
        answer is returned as one of its own draws, and the record names which."""
        log = tmp_path / "decisions.jsonl"
        policy = Policy(
            weights={"validators": 1.0, "agreement": 1.0},
            max_samples=6,
            accept_threshold=0.3,
            low_confidence=("stop",),
        )
        controller = RetryController(
            log=log, sample_final=True, model_policy=policy, interactive=False, sleep=no_wait
        )
        settings: dict[str, Any] = {"temperature": 1.0, "max_tokens": 16, "timeout": 120, "max_retries": 0}
        model = ChatOpenAI(model="smollm2", base_url=server_url, api_key=SecretStr("unused"), **settings)
        agent = create_agent(model, tools=[], middleware=[controller])
        questions = [f"Pick a whole number from 1 to 3 and write only that number. ({i})" for i in range(3)]
        returned = [
            str(agent.invoke({"messages": [HumanMessage(q)]})["messages"][-1].content) for q in questions
        ]
        sampled = [r for r in records(log) if r.get("kind") == "verdict"]
        assert len(sampled) == len(returned)  # one verdict on each question's draws
        for record, text in zip(sampled, returned, strict=True):
            summary = record["candidates_summary"]
            assert summary["answers"][summary["chosen"]] == record["answer"]
            if record["action"] == "accept":
                assert default_equivalence(text) == record["answer"]
            else:
                assert text.startswith("retryctl stopped the agent")
        assert verify_log(log).ok
