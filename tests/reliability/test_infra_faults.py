"""Infrastructure faults: a model server that cannot be reached, a breaker store that is down.

A batch against a dead port ends with exit 1 and every task an infrastructure failure, and ``--resume``
against a live server finishes them without touching a byte already written. A breaker whose store is
unreachable (a Redis on a closed port, a Redis stopped mid-run, a SQLite file locked by another writer)
ends the step in a logged verdict that says what the breaker decided, fail-open or fail-closed, never an
exception through the graph.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import sqlite3
import subprocess
import time
from collections.abc import Callable, Generator, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import HumanMessage
from langchain_core.tools import tool
from typer.testing import CliRunner

from retryctl.audit import DecisionLog, VerdictRecord, read_records, verify_log
from retryctl.batch import read_results
from retryctl.batch._outcome import infrastructure_failure
from retryctl.cli import app
from retryctl.controller import Breaker, BreakerConfig, BreakerState, BreakerStore, Policy
from retryctl.exceptions import BreakerStoreError
from retryctl.nodes import ControlledStep, ControlledToolNode
from retryctl.runtime import SQLiteBreakerStore
from retryctl.testing import ScriptedBackend
from tests.models._fault_server import FaultServer
from tests.reliability._harness import call_tools, invoke, tool_graph

runner = CliRunner()


@contextmanager
def dead_port() -> Iterator[int]:
    """A 127.0.0.1 port that is bound but never listens: every connection to it is refused, and no
    other process can start listening on it while the test runs."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        yield int(sock.getsockname()[1])


def _lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


# -- the decision: which final states are infrastructure failures -------------------------------------


def _verdict(error_class: str | None, *, target: str = "m", breakers: dict[str, str] | None = None) -> Any:
    evidence = {"error_class": error_class, "breakers": breakers or {}}
    return {"attempt": 1, "target": target, "verdict": {"reason": f"r-{error_class}", "evidence": evidence}}


def _state(status: str, samples: float, *verdicts: Any) -> dict[str, Any]:
    return {"result": {"status": status, "usage": {"samples": samples}}, "verdicts": list(verdicts)}


class TestInfrastructureFailure:
    @pytest.mark.parametrize(
        ("state", "expected"),
        [
            # every call failed transiently and nothing was drawn: the server was never reached
            (_state("stopped", 0, _verdict("transient"), _verdict("transient")), True),
            # ... and the budget ran out before the last attempt could call (no error on that verdict)
            (_state("stopped", 0, _verdict("transient"), _verdict(None)), True),
            # ... or a breaker opened by those faults refused the later calls
            (_state("stopped", 0, _verdict("transient"), _verdict("terminal", breakers={"m": "open"})), True),
            (_state("needs_user", 0, _verdict("transient")), True),
            # the model answered, badly: samples were drawn
            (_state("stopped", 3, _verdict("transient"), _verdict(None)), False),
            # the server was reached and refused the request as invalid / not found
            (_state("stopped", 0, _verdict("transient"), _verdict("validation")), False),
            (_state("stopped", 0, _verdict("terminal")), False),
            # a budget spent before any call: no fault at all
            (_state("stopped", 0, _verdict(None)), False),
            # answered or accepted: never
            (_state("accepted", 0, _verdict("transient")), False),
            # a graph without the step's verdicts or usage is never judged one
            ({"result": {"status": "stopped", "usage": {"samples": 0}}}, False),
            ({"result": {"status": "stopped"}, "verdicts": [_verdict("transient")]}, False),
            ("not a state", False),
        ],
    )
    def test_judged_on_the_steps_own_data(self, state: Any, expected: bool) -> None:
        found = infrastructure_failure(state)
        assert (found is not None) is expected
        if found is not None:
            assert str(found).startswith("no model answered (")
            assert "\n" not in str(found)


# -- a batch against a dead server, resumed against a live one -----------------------------------------


class TestDeadServerBatch:
    @pytest.mark.parametrize("checkpoints", [False, True], ids=["fresh-start", "checkpoints"])
    def test_exit_1_then_resume_finishes_every_task(self, tmp_path: Path, checkpoints: bool) -> None:
        tasks = tmp_path / "tasks.jsonl"
        tasks.write_text(
            '{"id": "a", "question": "What is 2 + 3?", "gold": "5"}\n'
            '{"id": "b", "question": "What is 7 * 6?"}\n'
        )
        tasks_bytes = tasks.read_bytes()
        out = tmp_path / "results.jsonl"
        extra = ["--checkpoints", str(tmp_path / "c.sqlite")] if checkpoints else []
        common = [str(tasks), "--out", str(out), "--model-name", "m", "--retries", "2", "--retry-wait", "0"]

        with dead_port() as port:
            dead = runner.invoke(app, ["batch", *common, "--base-url", f"http://127.0.0.1:{port}/v1", *extra])
        assert dead.exit_code == 1, dead.output
        assert "Traceback" not in dead.output
        problem = [line for line in dead.output.splitlines() if line.startswith("problem:")]
        assert problem == [
            "problem: 2 of 2 tasks failed on infrastructure (a dead or unreachable server, a crashed "
            "sandbox); --resume runs them again"
        ]
        lines = _lines(out)
        assert [(r["id"], r["status"], r["tries"]) for r in lines] == [
            ("a", "error", 2),
            ("b", "error", 2),
        ] or [(r["id"], r["status"], r["tries"]) for r in lines] == [("b", "error", 2), ("a", "error", 2)]
        for line in lines:
            assert line["error"].startswith("InfrastructureFailure: no model answered (")
            assert "ConnectError" in line["error"]
        assert read_results(out).finished == set()
        written = out.read_bytes()

        server = FaultServer().start()
        try:
            live = runner.invoke(app, ["batch", *common, "--base-url", server.url, "--resume", *extra])
        finally:
            server.stop()
        assert live.exit_code == 0, live.output
        assert not [line for line in live.output.splitlines() if line.startswith("problem:")]
        assert out.read_bytes().startswith(written)  # not one byte of the first run's lines changed
        assert tasks.read_bytes() == tasks_bytes
        resumed = _lines(out)[len(lines) :]
        assert sorted(r["id"] for r in resumed) == ["a", "b"]
        assert all(r["status"] in ("accepted", "stopped", "needs_user") for r in resumed)
        assert all(r["usage"]["samples"] > 0 for r in resumed)  # the model answered this time
        assert read_results(out).finished == {"a", "b"}


class TestDeadServerDemo:
    def test_one_problem_line_and_exit_3(self, tmp_path: Path) -> None:
        log = tmp_path / "demo.jsonl"
        with dead_port() as port:
            url = f"http://127.0.0.1:{port}/v1"
            result = runner.invoke(app, ["demo", "--base-url", url, "--model-name", "m", "--log", str(log)])
        assert result.exit_code == 3, result.output
        assert "Traceback" not in result.output
        problem = [line for line in result.output.splitlines() if line.startswith("problem:")]
        assert len(problem) == 1
        assert problem[0].startswith(f"problem: {url}: no model answered (")
        assert "ConnectError" in problem[0]
        assert verify_log(log).ok


# -- a breaker whose store is down ---------------------------------------------------------------------


def _redis_closed_port(_: Path) -> Generator[BreakerStore, None, None]:
    from retryctl.runtime import RedisBreakerStore

    with (
        dead_port() as port,
        RedisBreakerStore.from_url(f"redis://127.0.0.1:{port}/0", timeout_s=0.5) as store,
    ):
        yield store


def _sqlite_locked(tmp_path: Path) -> Generator[BreakerStore, None, None]:
    path = tmp_path / "breakers.sqlite"
    store = SQLiteBreakerStore(path, busy_timeout_s=0.05)
    store.update("other", lambda rec: (rec, None))  # a record of another key, which must survive as is
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")  # another process's writer holds the lock for the whole run
    try:
        yield store
    finally:
        holder.execute("ROLLBACK")
        holder.close()
        store.close()


STORES: dict[str, tuple[Callable[[Path], Generator[BreakerStore, None, None]], str]] = {
    "redis-down": (
        _redis_closed_port,
        r"breaker store redis://127\.0\.0\.1:\d+/0 failed \(clock\): ConnectionError",
    ),
    "sqlite-locked": (
        _sqlite_locked,
        r"breaker store sqlite:.*breakers\.sqlite failed \(update\): OperationalError: database is locked",
    ),
}


def _step(breaker: Breaker, log: DecisionLog) -> tuple[Any, ScriptedBackend]:
    model = ScriptedBackend(["The answer is 42"], model="m", cycle=True)
    step = ControlledStep(
        model,
        breaker=breaker,
        policy=Policy(min_samples=3, max_samples=3, max_retries=2),
        log=log,
        sleep=lambda _s: None,
        asleep=_no_wait,
    )
    return step.compile(), model


async def _no_wait(_seconds: float) -> None:
    return None


def _verdicts(path: Path) -> list[VerdictRecord]:
    return [r for r in read_records(path) if isinstance(r, VerdictRecord)]


class TestBreakerStoreDown:
    @pytest.mark.parametrize("store_kind", sorted(STORES))
    @pytest.mark.parametrize("policy", ["fail_open", "fail_closed"])
    def test_the_step_ends_in_a_logged_verdict(
        self, tmp_path: Path, store_kind: str, policy: str, mode: str
    ) -> None:
        make_store, error = STORES[store_kind]
        log_path = tmp_path / "log.jsonl"
        with DecisionLog(log_path) as log:  # an earlier run's record, whose bytes must not change
            log.record_summary(
                run_id="earlier",
                step_id="s",
                final_answer="1",
                sampling_history=[],
                budget_used={},
                budget_max={},
            )
        before = log_path.read_bytes()
        stores = make_store(tmp_path)
        store = next(stores)
        try:
            breaker = Breaker(BreakerConfig(on_store_error=policy), store=store)  # type: ignore[arg-type]
            with DecisionLog(log_path) as log:
                graph, model = _step(breaker, log)
                config = {"configurable": {"thread_id": "t", "run_id": "r"}}
                state = invoke(graph, {"messages": [HumanMessage("What is 6 * 7?")]}, config, mode)
        finally:
            stores.close()
        assert log_path.read_bytes().startswith(before)
        assert verify_log(log_path).ok
        records = _verdicts(log_path)
        admit_notes = [n for r in records for n in r.notes if " during admit for 'm' " in n]
        assert admit_notes, [r.notes for r in records]
        for note in admit_notes:
            assert "\n" not in note
            assert note.startswith("breaker store unreachable during admit for 'm' (")
            assert re.search(error, note), note
        if policy == "fail_open":
            assert admit_notes[-1].endswith("; fail_open: the call to 'm' goes ahead unguarded")
            assert state["result"]["status"] == "accepted" and state["result"]["answer"] == "42"
            assert len(model.calls) == 1
            assert [r.action.value for r in records] == ["accept"]
        else:
            assert admit_notes[-1].endswith("; fail_closed: the call to 'm' is refused")
            assert state["result"]["status"] == "stopped"
            assert model.calls == []  # refused before any call
            assert [r.action.value for r in records] == ["retry", "retry", "stop"]
            assert all(r.error_class == "transient" for r in records)
            # a batch would take this for an infrastructure failure and run the task again
            assert infrastructure_failure(state) is not None

    @pytest.mark.parametrize("store_kind", sorted(STORES))
    @pytest.mark.parametrize("policy", ["fail_open", "fail_closed"])
    def test_a_tool_call_ends_in_a_logged_verdict(
        self, tmp_path: Path, store_kind: str, policy: str, mode: str
    ) -> None:
        make_store, error = STORES[store_kind]
        ran: list[str] = []

        @tool
        def search(query: str) -> str:
            """Look something up."""
            ran.append(query)
            return f"found {query}"

        stores = make_store(tmp_path)
        store = next(stores)
        try:
            breaker = Breaker(BreakerConfig(on_store_error=policy), store=store)  # type: ignore[arg-type]
            with DecisionLog(tmp_path / "log.jsonl") as log:
                node = ControlledToolNode(
                    [search], breaker=breaker, log=log, sleep=lambda _s: None, asleep=_no_wait
                )
                messages = call_tools(tool_graph(node), ["search"], mode)
        finally:
            stores.close()
        records = _verdicts(tmp_path / "log.jsonl")
        admit_notes = [n for r in records for n in r.notes if " during admit for 'search' " in n]
        assert admit_notes and all(re.search(error, n) and "\n" not in n for n in admit_notes)
        if policy == "fail_open":
            assert messages["search"].status == "success" and ran == ["q"]
            assert admit_notes[-1].endswith("; fail_open: the call to 'search' goes ahead unguarded")
            assert records[-1].action.value == "accept"
        else:
            assert ran == []  # the tool never ran
            assert admit_notes[-1].endswith("; fail_closed: the call to 'search' is refused")
            assert records[-1].action.value == "stop"
            assert all(r.error_class == "transient" for r in records)

    def test_a_locked_sqlite_store_keeps_its_records(self, tmp_path: Path) -> None:
        stores = _sqlite_locked(tmp_path)
        store = next(stores)
        before = store.items()  # WAL: readers still read while another writer holds the lock
        try:
            with DecisionLog(tmp_path / "log.jsonl") as log:
                graph, _ = _step(Breaker(store=store), log)
                state = graph.invoke(
                    {"messages": [HumanMessage("What is 6 * 7?")]}, {"configurable": {"thread_id": "t"}}
                )
        finally:
            stores.close()
        assert state["result"]["status"] == "accepted"  # fail open by default
        with SQLiteBreakerStore(tmp_path / "breakers.sqlite") as reopened:
            assert reopened.items() == before  # nothing written, nothing half-written
        assert set(before) == {"other"}


class TestSQLiteStoreOnAFileThatIsNotOne:
    @pytest.mark.parametrize(
        "content", [b"not a database, just text\n" * 200, b"\x00" * 4096], ids=["text", "zeros"]
    )
    def test_opening_it_is_one_typed_error_naming_the_path(self, tmp_path: Path, content: bytes) -> None:
        path = tmp_path / "breakers.sqlite"
        path.write_bytes(content)
        with pytest.raises(BreakerStoreError) as got:
            SQLiteBreakerStore(path).close()
        message = str(got.value)
        assert message.startswith(f"breaker store sqlite:{path} failed (connect): ")
        assert "\n" not in message
        assert path.read_bytes() == content


# -- a real Redis stopped in the middle of a run ------------------------------------------------------


@pytest.fixture
def redis_server(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[bytes], str]]:
    """A private redis-server on a free 127.0.0.1 port (so stopping it disturbs no other test)."""
    binary = shutil.which("redis-server")
    if binary is None:
        if os.environ.get("CI"):
            pytest.fail("CI installs redis-server (make services), but it is not on PATH")
        pytest.skip("redis-server is not installed (make services installs it)")
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = int(sock.getsockname()[1])
    proc = subprocess.Popen(
        [
            binary,
            "--port",
            str(port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            str(tmp_path),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"redis://127.0.0.1:{port}/0"
    import redis

    deadline = time.monotonic() + 10
    while True:
        try:
            with redis.Redis.from_url(url, socket_connect_timeout=0.2) as client:
                client.ping()
            break
        except redis.ConnectionError:
            if time.monotonic() > deadline:
                proc.kill()
                pytest.fail(f"redis-server did not answer on {url}")
            time.sleep(0.05)
    try:
        yield proc, url
    finally:
        proc.kill()
        proc.wait()


class TestRedisStoppedMidRun:
    @pytest.mark.parametrize("policy", ["fail_open", "fail_closed"])
    def test_the_next_step_after_the_stop_is_decided_and_logged(
        self, tmp_path: Path, redis_server: tuple[subprocess.Popen[bytes], str], policy: str
    ) -> None:
        from retryctl.runtime import RedisBreakerStore

        proc, url = redis_server
        log_path = tmp_path / "log.jsonl"
        with RedisBreakerStore.from_url(url, timeout_s=0.5) as store, DecisionLog(log_path) as log:
            breaker = Breaker(BreakerConfig(on_store_error=policy), store=store)  # type: ignore[arg-type]
            graph, _ = _step(breaker, log)
            first = graph.invoke(
                {"messages": [HumanMessage("What is 6 * 7?")]}, {"configurable": {"thread_id": "1"}}
            )
            assert first["result"]["status"] == "accepted"
            assert breaker.state("m") is BreakerState.CLOSED
            proc.terminate()
            proc.wait()
            written = log_path.read_bytes()
            second = graph.invoke(
                {"messages": [HumanMessage("What is 6 * 7?")]}, {"configurable": {"thread_id": "2"}}
            )
        assert log_path.read_bytes().startswith(written)
        records = _verdicts(log_path)
        later = [r for r in records if r.run_id == "2"]
        notes = [
            n
            for r in later
            for n in r.notes
            if n.startswith("breaker store unreachable during admit for 'm' (")
        ]
        assert notes and all(f"breaker store {url} failed" in n for n in notes)
        expected = {"fail_open": "accepted", "fail_closed": "stopped"}[policy]
        assert second["result"]["status"] == expected
