"""Breaker stores: atomic updates in memory, shared across threads and real processes."""

from __future__ import annotations

import threading

from retryctl.controller._breaker_store import (
    BreakerRecord,
    BreakerStore,
    MemoryBreakerStore,
)
from tests.controller._stores import bump


class TestMemoryBreakerStore:
    def test_unknown_key_reads_closed(self):
        assert MemoryBreakerStore().get("k") == BreakerRecord()

    def test_update_returns_the_functions_value_and_stores_its_record(self):
        store = MemoryBreakerStore()
        assert store.update("k", bump) == 1
        assert store.update("k", bump) == 2
        assert store.items() == {"k": BreakerRecord(failures=2)}

    def test_threads_never_lose_an_update(self):
        store = MemoryBreakerStore()

        def work() -> None:
            for _ in range(500):
                store.update("k", bump)

        threads = [threading.Thread(target=work) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert store.get("k").failures == 2000

    def test_reset_one_or_all(self):
        store = MemoryBreakerStore()
        store.update("a", bump)
        store.update("b", bump)
        store.reset("a")
        assert list(store.items()) == ["b"]
        store.reset()
        assert store.items() == {}

    def test_satisfies_the_protocol(self):
        assert isinstance(MemoryBreakerStore(), BreakerStore)
        assert not MemoryBreakerStore.blocking
