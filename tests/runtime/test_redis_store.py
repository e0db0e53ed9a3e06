"""RedisBreakerStore against a real Redis server on 127.0.0.1 (``make services`` starts one).

The server is found at ``RETRYCTL_REDIS_URL`` (default ``redis://127.0.0.1:6390/0``, the Makefile's port).
Unreachable, the tests skip; under ``CI`` they fail, since ``.ci/run`` starts the server.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import redis

from retryctl.controller import Breaker, BreakerConfig, BreakerState, BreakerStore
from retryctl.controller._breaker_store import BreakerRecord
from retryctl.exceptions import BreakerStoreError
from retryctl.runtime._redis_store import RedisBreakerStore

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def store(redis_url: str) -> Iterator[RedisBreakerStore]:
    """A store in a namespace of its own, emptied afterwards."""
    with RedisBreakerStore.from_url(redis_url, namespace=f"test:{uuid.uuid4().hex}") as s:
        yield s
        s.reset()


@contextmanager
def no_server_url() -> Iterator[str]:
    """A ``redis://`` URL on a 127.0.0.1 port that is bound but never listens: connections are refused."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        yield f"redis://127.0.0.1:{sock.getsockname()[1]}/0"


def bump(rec: BreakerRecord) -> tuple[BreakerRecord, int]:
    new = BreakerRecord(state=rec.state, failures=rec.failures + 1)
    return new, new.failures


class TestRedisBreakerStore:
    def test_unknown_key_reads_closed_and_is_not_listed(self, store: RedisBreakerStore) -> None:
        assert store.get("k") == BreakerRecord()
        assert store.items() == {}

    def test_update_returns_the_functions_value_and_stores_its_record(self, store: RedisBreakerStore) -> None:
        assert store.update("k", bump) == 1
        assert store.update("k", bump) == 2
        assert store.items() == {"k": BreakerRecord(failures=2)}

    def test_round_trips_every_field_and_drops_fields_that_become_none(
        self, store: RedisBreakerStore
    ) -> None:
        record = BreakerRecord(
            state=BreakerState.HALF_OPEN,
            failures=4,
            opened_at=1_700_000_000.123456789,
            probes=2,
            successes=1,
            last_probe_at=0.1 + 0.2,
        )
        store.update("k", lambda _: (record, None))
        assert store.get("k") == record
        store.update("k", lambda _: (BreakerRecord(failures=1), None))
        assert store.get("k") == BreakerRecord(failures=1)

    def test_reset_one_or_all_of_its_namespace_only(self, store: RedisBreakerStore, redis_url: str) -> None:
        with RedisBreakerStore.from_url(redis_url, namespace=f"test:{uuid.uuid4().hex}") as other:
            other.update("a", bump)
            store.update("a", bump)
            store.update("b", bump)
            store.reset("a")
            assert list(store.items()) == ["b"]
            store.reset()
            assert store.items() == {}
            assert other.get("a").failures == 1
            other.reset()

    def test_a_client_answering_in_bytes_or_str_reads_the_same(
        self, store: RedisBreakerStore, redis_url: str
    ) -> None:
        store.update("k", bump)
        with redis.Redis.from_url(redis_url, decode_responses=True) as client:
            as_str = RedisBreakerStore(client, namespace=store.namespace)
            assert as_str.get("k") == store.get("k") == BreakerRecord(failures=1)
            assert as_str.items() == store.items()

    def test_a_write_between_read_and_exec_makes_it_read_and_apply_again(
        self, store: RedisBreakerStore, redis_url: str
    ) -> None:
        seen: list[int] = []

        def racing(rec: BreakerRecord) -> tuple[BreakerRecord, int]:
            seen.append(rec.failures)
            if len(seen) == 1:  # another worker writes after our WATCH and read
                RedisBreakerStore.from_url(redis_url, namespace=store.namespace).update("k", bump)
            return bump(rec)

        assert store.update("k", racing) == 2
        assert seen == [0, 1]
        assert store.get("k").failures == 2

    def test_a_failing_update_changes_nothing_and_the_store_stays_usable(
        self, store: RedisBreakerStore
    ) -> None:
        store.update("k", bump)

        def boom(rec: BreakerRecord) -> tuple[BreakerRecord, None]:
            raise RuntimeError("fn failed")

        with pytest.raises(RuntimeError):
            store.update("k", boom)
        assert store.get("k").failures == 1
        assert store.update("k", bump) == 2

    def test_threads_never_lose_an_update(self, store: RedisBreakerStore) -> None:
        def work() -> None:
            for _ in range(100):
                store.update("k", bump)

        threads = [threading.Thread(target=work) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert store.get("k").failures == 400

    def test_concurrent_processes_never_lose_an_update(
        self, store: RedisBreakerStore, redis_url: str
    ) -> None:
        code = f"""
from retryctl.controller import Breaker, BreakerConfig
from retryctl.runtime import RedisBreakerStore
store = RedisBreakerStore.from_url({redis_url!r}, namespace={store.namespace!r})
b = Breaker(BreakerConfig(failure_threshold=10**6), store=store)
for _ in range(150):
    b.record_failure("shared")
"""
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        procs = [
            subprocess.Popen([sys.executable, "-c", code], env=env, stderr=subprocess.PIPE) for _ in range(3)
        ]
        for p in procs:
            _, err = p.communicate(timeout=120)
            assert p.returncode == 0, err
        assert store.get("shared").failures == 450

    def test_a_forked_child_uses_its_own_connections(self, store: RedisBreakerStore) -> None:
        if "fork" not in multiprocessing.get_all_start_methods():
            pytest.skip("no fork on this platform")
        store.update("k", bump)  # the parent's pool now holds a connection
        child = multiprocessing.get_context("fork").Process(target=store.update, args=("k", bump))
        child.start()
        child.join(30)
        assert child.exitcode == 0
        assert store.update("k", bump) == 3

    def test_default_clock_is_the_servers(self, store: RedisBreakerStore) -> None:
        assert store.default_clock == store.server_time
        assert Breaker(store=store).clock == store.server_time
        # Same machine here, so the server's wall time is ours, to within the round trip.
        assert abs(store.server_time() - time.time()) < 1.0

    def test_satisfies_the_protocol_and_blocks(self, store: RedisBreakerStore) -> None:
        assert isinstance(store, BreakerStore)
        assert store.blocking

    def test_async_breaker_methods_run_on_it(self, store: RedisBreakerStore) -> None:
        breaker = Breaker(BreakerConfig(failure_threshold=1, cooldown_s=3600), store=store)

        async def main() -> tuple[BreakerState, bool, dict[str, str]]:
            state = await breaker.arecord_failure("search")
            return state, await breaker.aallow("search"), await breaker.astates()

        assert asyncio.run(main()) == (BreakerState.OPEN, False, {"search": "open"})

    def test_an_unreachable_server_fails_within_the_timeout(self) -> None:
        with no_server_url() as url:
            store = RedisBreakerStore.from_url(url, timeout_s=0.5)
            started = time.monotonic()
            with pytest.raises(
                BreakerStoreError, match=r"breaker store redis://127\.0\.0\.1:\d+/0 failed \(get\)"
            ) as got:
                store.get("k")
            assert time.monotonic() - started < 5.0
            assert isinstance(got.value.__cause__, redis.ConnectionError)

    def test_empty_namespace_is_refused(self, redis_url: str) -> None:
        with pytest.raises(ValueError, match="namespace"):
            RedisBreakerStore(redis.Redis.from_url(redis_url), namespace="")


class TestOptionalDependency:
    def test_retryctl_imports_without_redis_and_names_the_extra(self) -> None:
        code = (
            "import sys; sys.modules['redis'] = None\n"
            "import retryctl, retryctl.runtime as c\n"
            "try:\n    c.RedisBreakerStore\nexcept ImportError as e:\n    print(e)\n"
        )
        done = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
        )
        assert "pip install 'retryctl[workers]'" in done.stdout

    def test_the_lazy_export_is_the_class(self) -> None:
        import retryctl.runtime

        assert retryctl.runtime.RedisBreakerStore is RedisBreakerStore
        with pytest.raises(AttributeError):
            _ = retryctl.runtime.NoSuchName
