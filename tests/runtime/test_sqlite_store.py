"""The SQLite breaker store: state that survives a restart and is shared by real processes."""

from __future__ import annotations

import json
import multiprocessing
import os
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from retryctl.controller._breaker import Breaker, BreakerConfig
from retryctl.controller._breaker_store import (
    BreakerRecord,
    BreakerState,
    BreakerStore,
)
from retryctl.runtime import SQLiteBreakerStore
from tests.controller._stores import bump

ROOT = Path(__file__).resolve().parents[2]


def run_python(code: str) -> str:
    """Run ``code`` in a fresh interpreter (a real second process) and return its stdout."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-c", code], check=False, capture_output=True, text=True, env=env, timeout=60
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


class TestSQLiteBreakerStore:
    def test_state_survives_reopening(self, tmp_path):
        path = tmp_path / "breakers.db"
        with SQLiteBreakerStore(path) as store:
            b = Breaker(BreakerConfig(failure_threshold=2, cooldown_s=3600), store=store)
            b.record_failure("search")
            b.record_failure("search")
            assert b.state("search") is BreakerState.OPEN
        with SQLiteBreakerStore(path) as reopened:
            b2 = Breaker(BreakerConfig(failure_threshold=2, cooldown_s=3600), store=reopened)
            assert b2.state("search") is BreakerState.OPEN
            assert reopened.get("search").failures == 2
            assert isinstance(reopened, BreakerStore) and reopened.blocking

    def test_another_process_sees_the_state_and_writes_back(self, tmp_path):
        path = tmp_path / "breakers.db"
        store = SQLiteBreakerStore(path)
        b = Breaker(BreakerConfig(failure_threshold=1, cooldown_s=3600), store=store)
        b.record_failure("search")
        out = run_python(
            f"""
import json
from retryctl.controller._breaker import Breaker, BreakerConfig
from retryctl.runtime import SQLiteBreakerStore
from retryctl.exceptions import BreakerOpen
b = Breaker(BreakerConfig(failure_threshold=1, cooldown_s=3600),
            store=SQLiteBreakerStore({str(path)!r}))
try:
    b.before_call("search")
    refused = None
except BreakerOpen as err:
    refused = {{"key": err.key, "failures": err.failures, "retry_at": err.retry_at}}
b.record_failure("calculator")
print(json.dumps({{"states": b.states(), "refused": refused}}))
"""
        )
        seen = json.loads(out)
        opened_at = store.get("search").opened_at
        assert opened_at is not None
        assert seen["states"] == {"search": "open", "calculator": "open"}
        assert seen["refused"] == {"key": "search", "failures": 1, "retry_at": opened_at + 3600}
        assert b.state("calculator") is BreakerState.OPEN
        store.close()

    def test_concurrent_processes_never_lose_an_update(self, tmp_path):
        path = tmp_path / "breakers.db"
        SQLiteBreakerStore(path).close()
        code = f"""
from retryctl.controller._breaker import Breaker, BreakerConfig
from retryctl.runtime import SQLiteBreakerStore
b = Breaker(BreakerConfig(failure_threshold=10**6), store=SQLiteBreakerStore({str(path)!r}))
for _ in range(300):
    b.record_failure("shared")
"""
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        procs = [
            subprocess.Popen([sys.executable, "-c", code], env=env, stderr=subprocess.PIPE) for _ in range(3)
        ]
        for p in procs:
            _, err = p.communicate(timeout=120)
            assert p.returncode == 0, err
        with SQLiteBreakerStore(path) as store:
            assert store.get("shared").failures == 900

    def test_wal_mode_and_busy_timeout(self, tmp_path):
        path = tmp_path / "breakers.db"
        with SQLiteBreakerStore(path, busy_timeout_s=2.5) as store:
            store.update("k", bump)
        conn = sqlite3.connect(path)
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        conn.close()
        with pytest.raises(ValueError, match="busy_timeout_s"):
            SQLiteBreakerStore(path, busy_timeout_s=-1)

    def test_a_failing_update_rolls_back(self, tmp_path):
        with SQLiteBreakerStore(tmp_path / "b.db") as store:
            store.update("k", bump)

            def boom(rec: BreakerRecord) -> tuple[BreakerRecord, None]:
                raise RuntimeError("fn failed")

            with pytest.raises(RuntimeError):
                store.update("k", boom)
            assert store.get("k").failures == 1
            assert store.update("k", bump) == 2

    def test_round_trips_every_field(self, tmp_path):
        record = BreakerRecord(
            state=BreakerState.HALF_OPEN,
            failures=4,
            opened_at=1.5,
            probes=2,
            successes=1,
            last_probe_at=7.25,
        )
        with SQLiteBreakerStore(tmp_path / "b.db") as store:
            store.update("k", lambda _: (record, None))
            assert store.get("k") == record
            store.reset("k")
            assert store.get("k") == BreakerRecord()

    def test_a_forked_child_reconnects(self, tmp_path):
        if "fork" not in multiprocessing.get_all_start_methods():
            pytest.skip("no fork on this platform")
        store = SQLiteBreakerStore(tmp_path / "b.db")
        store.update("k", bump)
        ctx = multiprocessing.get_context("fork")
        child = ctx.Process(target=store.update, args=("k", bump))
        child.start()
        child.join(30)
        assert child.exitcode == 0
        assert store.get("k").failures == 2
        store.close()

    def test_default_clock_is_wall_time(self, tmp_path):
        with SQLiteBreakerStore(tmp_path / "b.db") as store:
            assert store.default_clock is time.time
