"""An interrupted run resumes in a second process from the SQLite checkpoint (real subprocesses)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

SCRIPT = textwrap.dedent(
    '''
    import json, sys
    from langchain_core.messages import AIMessage, HumanMessage
    from langchain_core.tools import tool
    from langgraph.checkpoint.sqlite import SqliteSaver
    from langgraph.graph import END, START, MessagesState, StateGraph
    from langgraph.types import Command

    from retryctl.controller import Policy, ValidatorResult
    from retryctl.nodes import ControlledStep, ControlledToolNode, SQLiteToolJournal
    from retryctl.testing import ScriptedBackend

    mode, db, charges = sys.argv[1], sys.argv[2], sys.argv[3]

    policy = Policy(
        stopping="sc-3", min_samples=3, max_samples=3, max_refines=0, low_confidence=("ask_user",)
    )
    step = ControlledStep(ScriptedBackend(["1", "2", "3"], cycle=True), policy=policy, step_id="solve")

    @tool
    def charge(amount: int) -> str:
        """Charge a card (never twice)."""
        with open(charges, "a") as f:
            f.write(f"{amount}\\n")
        return str(-amount)

    charge.metadata = {"idempotent": False}

    def non_negative(content, args):
        return ValidatorResult("non_negative", float(content) >= 0, f"{content} < 0")

    tools = ControlledToolNode(
        [charge],
        validators={"charge": [non_negative]},
        policy=Policy(weights={"validators": 1.0}, max_refines=0),
        journal=SQLiteToolJournal(db),
    )
    def ask_to_charge(state):
        call = {"name": "charge", "args": {"amount": 5}, "id": "c1"}
        return {"messages": [AIMessage("", tool_calls=[call])]}


    with SqliteSaver.from_conn_string(db) as saver:
        graph = StateGraph(MessagesState)
        graph.add_node("solve", step.compile())
        graph.add_node("plan", ask_to_charge)
        graph.add_node("tools", tools)
        graph.add_edge(START, "solve")
        graph.add_edge("solve", "plan")
        graph.add_edge("plan", "tools")
        graph.add_edge("tools", END)
        app = graph.compile(checkpointer=saver)
        config = {"configurable": {"thread_id": "job-1"}}
        if mode == "start":
            out = app.invoke({"messages": [HumanMessage("pick one")]}, config)
        else:
            out = app.invoke(Command(resume=json.loads(sys.argv[4])), config)
        interrupts = [i.value for i in out.get("__interrupt__", ())]
        messages = [[type(m).__name__, m.content] for m in out["messages"]]
        print(json.dumps({"interrupts": interrupts, "messages": messages}))
    '''
)


def run_process(script: Path, *args: str) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, str(script), *args], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


class TestResumeInANewProcess:
    def test_interrupts_resume_from_sqlite_and_a_charge_is_never_repeated(self, tmp_path: Path) -> None:
        script = tmp_path / "app.py"
        script.write_text(SCRIPT)
        db, charges = str(tmp_path / "run.sqlite"), str(tmp_path / "charges.txt")

        first = run_process(script, "start", db, charges)
        [asked] = first["interrupts"]
        assert asked["type"] == "retryctl.ask_user" and asked["step_id"] == "solve"

        # Process 2: answers the step's question; the graph runs on to the charge, which asks too.
        second = run_process(script, "resume", db, charges, json.dumps({"action": "answer", "answer": "2"}))
        [charge_asks] = second["interrupts"]
        assert charge_asks["best"]["answer"] == "-5"
        assert Path(charges).read_text() == "5\n"

        # Process 3: accepts the charge's result; the non-idempotent tool is not run again.
        third = run_process(script, "resume", db, charges, json.dumps({"action": "accept"}))
        assert third["interrupts"] == []
        assert ["AIMessage", "2"] in third["messages"]
        assert third["messages"][-1] == ["ToolMessage", "-5"]
        assert Path(charges).read_text() == "5\n"
