"""A ``create_agent`` agent under ``RetryController`` pauses at ``ask_user`` and resumes in another
process from SQLite (real subprocesses, LangGraph's ``SqliteSaver``).

What is real: every process is a fresh interpreter; the checkpoint, the tool journal and the decision
log are files the processes share, nothing else. The model is scripted, and stateless across
processes (it answers from the messages it is given: no tool result yet, it asks for a charge; a result,
it reports it), because the test is about where the run's state lives, not about a model.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from retryctl.audit import verify_log

SCRIPT = textwrap.dedent(
    '''
    import json, sys

    from langchain.agents import create_agent
    from langchain_core.language_models import BaseChatModel
    from langchain_core.messages import AIMessage, ToolMessage
    from langchain_core.outputs import ChatGeneration, ChatResult
    from langchain_core.tools import tool
    from langgraph.checkpoint.sqlite import SqliteSaver
    from langgraph.types import Command

    from retryctl.controller import Policy, ValidatorResult
    from retryctl.middleware import RetryController
    from retryctl.nodes import SQLiteToolJournal

    mode, db, charges, log = sys.argv[1:5]


    class Cashier(BaseChatModel):
        """No tool result yet: charge 5. A result: report it."""

        def _generate(self, messages, stop=None, run_manager=None, **kwargs):
            done = [m for m in messages if isinstance(m, ToolMessage)]
            if done:
                message = AIMessage(f"charged: {done[-1].content}")
            else:
                message = AIMessage("", tool_calls=[{"name": "charge", "args": {"amount": 5}, "id": "c1"}])
            return ChatResult(generations=[ChatGeneration(message=message)])

        def bind_tools(self, tools, **kwargs):
            return self

        @property
        def _llm_type(self):
            return "cashier"


    @tool
    def charge(amount: int) -> str:
        """Charge a card (never twice)."""
        with open(charges, "a") as f:
            f.write(f"{amount}\\n")
        return str(-amount)


    charge.metadata = {"idempotent": False}


    def non_negative(content, args):
        return ValidatorResult("non_negative", float(content) >= 0, f"{content} < 0")


    controller = RetryController(
        policy=Policy(weights={"validators": 1.0}, max_refines=0),
        validators={"charge": [non_negative]},
        journal=SQLiteToolJournal(db),
        log=log,
    )
    with SqliteSaver.from_conn_string(db) as saver:
        agent = create_agent(Cashier(), tools=[charge], middleware=[controller], checkpointer=saver)
        config = {"configurable": {"thread_id": "order-1"}}
        if mode == "start":
            out = agent.invoke({"messages": [("user", "charge me 5")]}, config)
        else:
            out = agent.invoke(Command(resume=json.loads(sys.argv[5])), config)
        interrupts = [i.value for i in out.get("__interrupt__", ())]
        messages = [[type(m).__name__, m.content] for m in out["messages"]]
        print(json.dumps({"interrupts": interrupts, "messages": messages}))
    '''
)


def run_process(script: Path, *args: str) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, str(script), *args], capture_output=True, text=True, timeout=180, check=False
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


class TestResumeInANewProcess:
    @pytest.mark.parametrize(
        ("reply", "result"),
        [
            ({"decisions": [{"type": "approve"}]}, "-5"),  # HumanInTheLoopMiddleware's resume, batched
            ({"type": "respond", "message": "refunded"}, "refunded"),  # one HITL decision
            ({"action": "accept"}, "-5"),  # retryctl's own reply
        ],
        ids=["hitl-approve", "hitl-respond", "retryctl-accept"],
    )
    def test_ask_user_pauses_and_resumes_from_sqlite_without_repeating_the_charge(
        self, tmp_path: Path, reply: dict[str, Any], result: str
    ) -> None:
        script = tmp_path / "agent.py"
        script.write_text(SCRIPT)
        files = [str(tmp_path / name) for name in ("run.sqlite", "charges.txt", "decisions.jsonl")]
        charges, log = Path(files[1]), Path(files[2])

        # Process 1: the charge runs, its result fails the check, and the controller asks; the process ends.
        first = run_process(script, "start", *files)
        [asked] = first["interrupts"]
        assert asked["type"] == "retryctl.ask_user"
        assert asked["tool_call_id"] == "c1"
        assert asked["best"]["answer"] == "-5"
        assert "non_negative" in asked["reason"]
        assert charges.read_text() == "5\n"
        assert first["messages"][-1][0] == "AIMessage"  # paused inside the tool call: no ToolMessage yet

        # Process 2, a fresh interpreter: resumes from the SQLite checkpoint with the person's reply.
        second = run_process(script, "resume", *files, json.dumps(reply))
        assert second["interrupts"] == []
        assert ["ToolMessage", result] in second["messages"]
        assert second["messages"][-1] == ["AIMessage", f"charged: {result}"]
        assert charges.read_text() == "5\n"  # the non-idempotent tool did not run again

        # Both processes appended to one log, which verifies; the tool call's last verdict is the person's.
        assert verify_log(log).ok
        records = [json.loads(line) for line in log.read_text().splitlines()]
        call = [r for r in records if r.get("kind") == "verdict" and r["step_id"] == "tool:charge:c1"]
        assert [r["action"] for r in call] == ["ask_user", "accept"]
        assert call[-1]["extra"]["decided_by"] == "user"
        assert {r["run_id"] for r in records if r.get("kind") == "verdict"} == {"order-1"}
