"""A run's spend outlives its process: the record in the agent state and in the journal, the ledger
seeded from it, and a budget that stops a run resumed elsewhere where one process would have stopped.

The process tests run real interpreters over one SQLite file (LangGraph's ``SqliteSaver`` and
retryctl's ``SQLiteToolJournal``); the agent is ``tests/middleware/_lookups.py``.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain_core.messages import AIMessage
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.types import Command

from retryctl.controller import Budget, ManualClock, Policy, Usage
from retryctl.exceptions import ConfigError
from retryctl.middleware import RUN_KEY, RetryController
from retryctl.middleware._carry import Spend, journal_key, read_record
from retryctl.middleware._runs import RunBook, record_of
from retryctl.nodes import MemoryToolJournal, SQLiteToolJournal
from tests.middleware import _lookups
from tests.middleware._scripted import ScriptedChat, say

ROOT = Path(__file__).resolve().parents[2]
STOPPED = "retryctl stopped the agent: run budget 'attempts' is spent (6 of 6)"
ONE_RUN = [
    ["HumanMessage", "look up the items"],
    ["AIMessage", ""],
    ["ToolMessage", ""],  # lookup 1: asked about, accepted
    ["AIMessage", ""],
    ["ToolMessage", "item 2"],
    ["AIMessage", ""],
    ["ToolMessage", "item 3"],
    ["AIMessage", STOPPED],  # attempt 7 would be the model call: refused
]
"""The transcript of one uninterrupted run under ``Budget(attempts=6)`` (see ``_lookups``)."""


def _spent(book: RunBook, usage: Usage) -> str:
    """A run of ``book`` that has spent ``usage``; its id."""
    run = book.open()
    run.ledger.reserve(usage).commit(usage)
    return run.id


class TestRunRecord:
    def test_the_state_round_trip_carries_every_limit(self) -> None:
        clock = ManualClock()
        budget = Budget(attempts=10, samples=10, input_tokens=1000, usd=1.0, wall_s=60.0)
        book = RunBook(budget, clock=clock)
        run = book.get(_spent(book, Usage(attempts=3, samples=2, input_tokens=250, usd=0.3)))
        run.ledger.extend(Usage(attempts=2, usd=0.1))  # a person's "extend" reply
        run.count("model")
        run.count("tool")
        clock.advance(12.5)

        # What the state holds is plain JSON (a checkpointer may serialize it any way).
        state = {"messages": [], RUN_KEY: json.loads(json.dumps(run.record()))}
        run_id, spend = record_of(state)
        assert run_id == run.id and spend is not None

        # Another process: a new book, another clock, the same budget.
        other = RunBook(budget, clock=ManualClock(1000.0)).get(run_id, spend)
        assert other.ledger.snapshot().used == run.ledger.snapshot().used
        assert other.ledger.snapshot().used["wall_s"] == 12.5  # the clock goes on from the carried time
        assert (
            other.ledger.budget == run.ledger.budget == budget.model_copy(update={"attempts": 12, "usd": 1.1})
        )
        assert other.ledger.remaining().usd == pytest.approx(0.8)
        assert (other.model_calls, other.tool_calls) == (1, 1)
        assert other.record() == run.record()

    def test_a_carried_budget_stops_where_the_first_ledger_would(self) -> None:
        book = RunBook(Budget(attempts=3), clock=ManualClock())
        run = book.get(_spent(book, Usage(attempts=2)))
        _, spend = read_record(run.record())
        resumed = RunBook(Budget(attempts=3), clock=ManualClock()).get(run.id, spend)
        assert resumed.ledger.exhausted() is None
        resumed.ledger.reserve(Usage(attempts=1)).commit(Usage(attempts=1))
        spent = resumed.ledger.exhausted()
        assert spent is not None and (spent.limit_name, spent.used) == ("attempts", 3.0)

    def test_a_carried_wall_time_is_spent_time(self) -> None:
        clock = ManualClock()
        book = RunBook(Budget(wall_s=10.0), clock=clock)
        run = book.open()
        clock.advance(10.0)
        resumed = RunBook(Budget(wall_s=10.0), clock=ManualClock()).get(run.id, run.spend())
        spent = resumed.ledger.exhausted()
        assert spent is not None and spent.limit_name == "wall_s"

    def test_more_than_a_smaller_budget_is_carried_as_the_limit(self) -> None:
        book = RunBook(Budget(attempts=5), clock=ManualClock())
        spend = book.get(_spent(book, Usage(attempts=4))).spend()
        resumed = RunBook(Budget(attempts=2), clock=ManualClock()).get("r", spend)
        assert resumed.ledger.snapshot().used["attempts"] == 2.0
        assert resumed.ledger.exhausted() is not None

    def test_a_bare_id_is_an_earlier_versions_record(self) -> None:
        assert record_of({RUN_KEY: "abc", "messages": []}) == ("abc", Spend())
        fresh = RunBook(Budget(attempts=1), clock=ManualClock()).get("abc", Spend())
        assert fresh.ledger.snapshot().used["attempts"] == 0.0

    def test_a_held_run_keeps_its_own_ledger(self) -> None:
        book = RunBook(Budget(attempts=5), clock=ManualClock())
        run = book.get(_spent(book, Usage(attempts=1)))
        assert book.get(run.id, Spend(used={"attempts": 4.0})) is run
        assert run.ledger.snapshot().used["attempts"] == 1.0

    @pytest.mark.parametrize(
        ("record", "field"),
        [
            (42, "state['retryctl_run']"),
            ({"used": {}}, "state['retryctl_run']['id']"),
            ({"id": "r", "used": {"attempts": -1}}, "state['retryctl_run']['used']['attempts']"),
            ({"id": "r", "used": {"attempts": "2"}}, "state['retryctl_run']['used']['attempts']"),
            ({"id": "r", "used": {"dollars": 1.0}}, "state['retryctl_run']['used']['dollars']"),
            ({"id": "r", "used": [1, 2]}, "state['retryctl_run']['used']"),
            ({"id": "r", "extended": {"usd": float("nan")}}, "state['retryctl_run']['extended']['usd']"),
            ({"id": "r", "model_calls": 1.5}, "state['retryctl_run']['model_calls']"),
            ({"id": "r", "spent": {}}, "state['retryctl_run']['spent']"),
        ],
    )
    def test_a_malformed_record_names_the_field(self, record: object, field: str) -> None:
        with pytest.raises(ConfigError) as caught:
            record_of({RUN_KEY: record})
        assert caught.value.field == field


class TestRunBookJournal:
    def test_an_interrupt_keeps_the_spend_in_the_journal(self) -> None:
        journal = MemoryToolJournal()
        book = RunBook(Budget(attempts=9), clock=ManualClock(), journal=journal)
        run = book.get(_spent(book, Usage(attempts=3)))
        state_spend = Spend(used={"attempts": 1.0})  # the state was written before the last two
        book.save(run)
        assert read_record(journal.get(journal_key(run.id)))[1] == run.spend()

        # Met again without its ledger: the larger of the state's and the journal's record.
        other = RunBook(Budget(attempts=9), clock=ManualClock(), journal=journal)
        assert other.meet({RUN_KEY: state_spend.record(run.id)}).ledger.snapshot().used["attempts"] == 3.0

    def test_the_journal_keeps_the_largest_record(self) -> None:
        journal = MemoryToolJournal()
        book = RunBook(Budget(), clock=ManualClock(), journal=journal)
        run = book.get(_spent(book, Usage(attempts=3)))
        book.save(run)
        stale = RunBook(Budget(), clock=ManualClock(), journal=journal).get(
            run.id, Spend(used={"attempts": 1.0})
        )
        RunBook(Budget(), clock=ManualClock(), journal=journal).save(stale)  # an older view, saved later
        assert read_record(journal.get(journal_key(run.id)))[1] == run.spend()

    def test_a_run_without_a_record_carries_nothing(self) -> None:
        # Its id is LangGraph's (the thread's, say), shared by every agent run on the thread.
        journal = MemoryToolJournal()
        book = RunBook(Budget(), clock=ManualClock(), journal=journal)
        run = book.meet({"messages": []})
        book.save(run)
        assert record_of({"messages": []})[1] is None
        assert run.id.startswith("graph:") and journal.get(journal_key(run.id)) is None


class TestForgottenRun:
    def test_a_run_the_book_forgot_goes_on_with_its_spend(self, tmp_path: Path, mode: str) -> None:
        ran = tmp_path / "ran.txt"
        agent, controller = _lookups.build(InMemorySaver(), ran, attempts=6, journal=MemoryToolJournal())
        paused = _invoke(agent, mode, {"messages": [("user", "look up the items")]})
        assert paused["__interrupt__"][0].value["tool_call_id"] == "c1"
        run_id = agent.get_state(_lookups.CONFIG).values[RUN_KEY]["id"]
        controller.runs.keep = 1
        controller.runs.open()  # other runs went on meanwhile: this one's ledger is forgotten
        assert controller.run(run_id) is None

        out = _invoke(agent, mode, Command(resume={"action": "accept"}))
        assert _lookups.transcript(out) == ONE_RUN
        assert ran.read_text().split() == ["1", "2", "3"]  # as in one uninterrupted run
        run = controller.run(agent.get_state(_lookups.CONFIG).values[RUN_KEY])
        assert run is not None and run.ledger.snapshot().used["attempts"] == 6.0


class TestModelCallAsks:
    def test_a_model_call_that_asks_keeps_the_spend_for_the_next_process(
        self, tmp_path: Path, mode: str
    ) -> None:
        # Each "process" is a new controller (a new book) over the same checkpoint and journal.
        saver, journal, ran = (
            InMemorySaver(),
            SQLiteToolJournal(tmp_path / "journal.sqlite"),
            tmp_path / "ran",
        )
        asking = {
            "validators": {},
            "model_policy": Policy(weights={"validators": 1.0}, on_budget_exhausted="ask_user"),
        }

        agent, _ = _lookups.build(saver, ran, attempts=2, journal=journal, **asking)
        paused = _invoke(agent, mode, {"messages": [("user", "look up the items")]})
        # model call 1, lookup 1; the model call after it asks for more budget.
        assert "'attempts' is spent (2 of 2)" in paused["__interrupt__"][0].value["reason"]

        agent, _ = _lookups.build(saver, ran, attempts=2, journal=journal, **asking)
        again = _invoke(agent, mode, Command(resume={"action": "extend", "budget": {"attempts": 2}}))
        # The 2 attempts spent in the first process count: the 2 granted buy model call 3 and lookup 2.
        assert "'attempts' is spent (4 of 4)" in again["__interrupt__"][0].value["reason"]
        assert ran.read_text().split() == ["1", "2"]
        record = agent.get_state(_lookups.CONFIG).values[RUN_KEY]
        assert record["extended"] == {"attempts": 2.0}


class TestParallelCalls:
    def test_a_sibling_that_ends_after_the_question_keeps_its_spend(self, tmp_path: Path, mode: str) -> None:
        journal, saver = _Watched(tmp_path / "journal.sqlite"), InMemorySaver()
        both = AIMessage(
            "",
            tool_calls=[
                {"name": "lookup", "args": {"n": 1}, "id": "c1"},  # asks
                {"name": "lookup", "args": {"n": 2}, "id": "c2"},  # ends after the question
            ],
        )
        model = ScriptedChat(script=[both, say("done")])

        @tool
        def lookup(n: int) -> str:
            """Look an item up."""
            if n == 2:  # ends after the other call has asked (and kept the run's spend)
                assert journal.kept.wait(timeout=30)
            return "" if n == 1 else f"item {n}"

        def agent() -> Any:
            controller = RetryController(
                policy=Policy(weights={"validators": 1.0}, max_refines=0),
                validators={"lookup": [_lookups.non_empty]},
                journal=journal,
            )
            return create_agent(model, tools=[lookup], middleware=[controller], checkpointer=saver)

        paused = _invoke(agent(), mode, {"messages": [("user", "look up 1 and 2")]})
        assert paused["__interrupt__"][0].value["tool_call_id"] == "c1"
        resumed = agent()  # another controller: the run's ledger is not in its book
        out = _invoke(resumed, mode, Command(resume={"action": "accept"}))
        assert out["messages"][-1].content == "done"
        # Two model calls and both tool calls: none lost to the process change.
        record = resumed.get_state(_lookups.CONFIG).values[RUN_KEY]
        assert record["used"]["attempts"] == 4.0


class _Watched(SQLiteToolJournal):
    """A SQLite journal that says when a run's spend was kept in it."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.kept = threading.Event()

    def put(self, key: str, record: dict[str, Any]) -> None:
        super().put(key, record)
        if key.startswith("retryctl.run/"):
            self.kept.set()


def _invoke(agent: Any, mode: str, value: Any) -> Any:
    if mode == "sync":
        return agent.invoke(value, _lookups.CONFIG)
    return asyncio.run(agent.ainvoke(value, _lookups.CONFIG))


def run_process(tmp_path: Path, mode: str, journal: str) -> dict[str, Any]:
    args = [mode, str(tmp_path / "run.sqlite"), str(tmp_path / "ran.txt"), "6", journal]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-m", "tests.middleware._lookups", *args],
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
        cwd=ROOT,
        env=env,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


@pytest.fixture(scope="module")
def one_process(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The run paused and resumed in one process: what the others must match."""
    where = tmp_path_factory.mktemp("one")
    out = run_process(where, "both", "sqlite")
    out["ran"] = (where / "ran.txt").read_text().split()
    return out


class TestResumeInANewProcess:
    def test_the_budget_stops_the_resumed_run_where_one_process_would(
        self, tmp_path: Path, one_process: dict[str, Any]
    ) -> None:
        assert one_process["messages"] == ONE_RUN
        assert one_process["ran"] == ["1", "2", "3"]

        first = run_process(tmp_path, "start", "sqlite")
        [asked] = first["interrupts"]
        assert asked["tool_call_id"] == "c1" and asked["evidence"]["budget_used"]["attempts"] == 2.0
        # The state was last written by the model call; the tool attempt is in the journal.
        assert first["record"]["used"]["attempts"] == 1.0

        second = run_process(tmp_path, "resume", "sqlite")
        assert second["messages"] == one_process["messages"]
        assert (tmp_path / "ran.txt").read_text().split() == ["1", "2", "3"]
        assert second["record"]["id"] == first["record"]["id"]
        assert second["record"]["used"]["attempts"] == one_process["record"]["used"]["attempts"] == 6.0
        assert (second["record"]["model_calls"], second["record"]["tool_calls"]) == (3, 3)

    def test_with_a_memory_journal_the_state_carries_the_spend_and_the_call_is_redone(
        self, tmp_path: Path, one_process: dict[str, Any]
    ) -> None:
        run_process(tmp_path, "start", "memory")
        second = run_process(tmp_path, "resume", "memory")
        # The journal went with the first process: lookup 1 runs again and is charged again; the
        # state carried the model call before it. The budget stops the run at the same place.
        assert (tmp_path / "ran.txt").read_text().split() == ["1", "1", "2", "3"]
        assert second["messages"] == one_process["messages"]
