"""The book of runs: one ledger per run id, bounded, shared safely by threads."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from langchain_core.messages import AIMessage, HumanMessage
from langchain_core.runnables.config import var_child_runnable_config

from retryctl.controller import Budget, ManualClock, Reservation, Usage
from retryctl.exceptions import ConfigError
from retryctl.middleware._runs import RUN_KEY, RunBook, latest_user_message, run_of
from retryctl.nodes import MemoryToolJournal


class TestRunBook:
    def test_a_run_keeps_its_ledger(self) -> None:
        book = RunBook(Budget(attempts=3), clock=ManualClock())
        run = book.open()
        assert book.get(run.id) is run and book.find(run.id) is run
        assert run.ledger.budget == Budget(attempts=3)
        assert book.open().ledger is not run.ledger

    def test_an_unknown_run_opens_a_fresh_ledger(self) -> None:
        book = RunBook(Budget(), clock=ManualClock())
        assert book.find("elsewhere") is None
        assert book.get("elsewhere").id == "elsewhere"

    def test_only_the_latest_runs_are_kept(self) -> None:
        book = RunBook(Budget(), clock=ManualClock(), keep=2)
        first, second = book.open(), book.open()
        book.get(first.id)  # used again: now the most recent
        book.open()
        assert book.find(second.id) is None and book.find(first.id) is first

    def test_counts_from_many_threads(self) -> None:
        run = RunBook(Budget(), clock=ManualClock()).open()

        def count() -> None:
            for _ in range(1000):
                run.count("tool")
                run.count("model")

        threads = [threading.Thread(target=count) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert (run.model_calls, run.tool_calls) == (4000, 4000)

    def test_run_of_reads_the_state(self) -> None:
        assert run_of({RUN_KEY: "abc", "messages": []}) == "abc"


@contextmanager
def _thread(thread_id: str) -> Iterator[None]:
    """Hooks called as inside a graph run on ``thread_id`` (what a checkpointer's config carries)."""
    token = var_child_runnable_config.set({"configurable": {"thread_id": thread_id}})
    try:
        yield
    finally:
        var_child_runnable_config.reset(token)


def _asked(text: str, message_id: str, record: object = None) -> dict[str, object]:
    state: dict[str, object] = {"messages": [HumanMessage(text, id=message_id), AIMessage("...")]}
    if record is not None:
        state[RUN_KEY] = record
    return state


class TestWhereARunBegins:
    def test_the_first_hook_after_a_user_message_opens_a_run_the_later_ones_meet(self) -> None:
        book = RunBook(Budget(attempts=3), clock=ManualClock())
        with _thread("t1"):
            run = book.meet(_asked("hi", "m1"))
            assert run.anchor == "m1" and run.record()["anchor"] == "m1"
            assert book.meet(_asked("hi", "m1", run.record())) is run  # the model node wrote it
            assert book.meet(_asked("hi", "m1")) is run  # no record yet (a call that asked): the same

    def test_a_new_user_message_is_a_new_run_with_a_budget_of_its_own(self) -> None:
        book = RunBook(Budget(attempts=3), clock=ManualClock())
        with _thread("t1"):
            first = book.meet(_asked("hi", "m1"))
            first.ledger.try_reserve(Usage(attempts=3))
            second = book.meet(_asked("again", "m2", first.record()))  # the earlier run's record
        assert second is not first and second.anchor == "m2"
        assert second.ledger.snapshot().used["attempts"] == 0.0

    def test_a_run_that_asked_before_its_first_record_meets_its_spend_in_another_process(self) -> None:
        journal = MemoryToolJournal()
        with _thread("t1"):
            book = RunBook(Budget(attempts=5), clock=ManualClock(), journal=journal)
            run = book.meet(_asked("hi", "m1"))
            held = run.ledger.try_reserve(Usage(attempts=2))
            assert isinstance(held, Reservation)
            run.ledger.commit(held, Usage(attempts=2))
            book.save(run)  # the interrupt left the model call: the state got no record
            other = RunBook(Budget(attempts=5), clock=ManualClock(), journal=journal)
            resumed = other.meet(_asked("hi", "m1"))
        assert resumed.id == run.id and resumed is not run
        assert resumed.ledger.snapshot().used["attempts"] == 2.0

    def test_the_same_message_on_another_thread_is_another_run(self) -> None:
        book = RunBook(Budget(), clock=ManualClock())
        with _thread("t1"):
            one = book.meet(_asked("hi", "m1"))
        with _thread("t2"):
            two = book.meet(_asked("hi", "m1"))
        assert one is not two and one.id != two.id

    def test_without_a_checkpointer_every_run_is_fresh_even_for_a_reused_message(self) -> None:
        # add_messages writes the id it gives into the caller's message object, so a message sent
        # again carries the same id; with no thread nothing can resume, and no ledger is shared.
        book = RunBook(Budget(), clock=ManualClock())
        assert book.meet(_asked("hi", "m1")) is not book.meet(_asked("hi", "m1"))

    def test_a_record_without_an_anchor_is_the_run_in_progress(self) -> None:
        # An earlier version's record (its before_agent opened the run): a resume across the
        # upgrade keeps its ledger rather than start the budget again.
        book = RunBook(Budget(), clock=ManualClock())
        old = book.open()
        with _thread("t1"):
            assert book.meet(_asked("hi", "m1", {"id": old.id})) is old
            assert book.meet(_asked("hi", "m1", old.id)) is old

    def test_a_malformed_anchor_names_the_field(self) -> None:
        book = RunBook(Budget(), clock=ManualClock())
        with pytest.raises(ConfigError, match=r"retryctl_run'\]\['anchor'\]"):
            book.meet(_asked("hi", "m1", {"id": "r1", "anchor": 7}))

    def test_the_latest_user_message_is_found_behind_the_agents_turns(self) -> None:
        messages = [HumanMessage("a", id="m1"), AIMessage("b"), HumanMessage("c", id="m2"), AIMessage("d")]
        assert latest_user_message({"messages": messages}) == "m2"
        assert latest_user_message({"messages": [AIMessage("x")]}) is None
        assert latest_user_message({}) is None
