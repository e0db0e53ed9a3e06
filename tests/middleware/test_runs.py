"""The book of runs: one ledger per run id, bounded, shared safely by threads."""

from __future__ import annotations

import threading

from retryctl.controller import Budget, ManualClock
from retryctl.middleware._runs import RUN_KEY, RunBook, run_of


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
