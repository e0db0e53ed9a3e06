"""Circuit breakers: config, each transition, the async twins, and a state-machine property test."""

from __future__ import annotations

import asyncio
import tempfile
import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from retryctl.controller._breaker import Breaker, BreakerConfig, counts_against
from retryctl.controller._breaker_store import (
    BreakerState,
    MemoryBreakerStore,
)
from retryctl.controller._clock import ManualClock
from retryctl.controller._errors import Classification, ErrorClass
from retryctl.exceptions import BreakerOpen, BreakerStoreError
from retryctl.runtime import SQLiteBreakerStore

CLOSED, OPEN, HALF = BreakerState.CLOSED, BreakerState.OPEN, BreakerState.HALF_OPEN


def breaker(clock: ManualClock, **config: float) -> Breaker:
    return Breaker(BreakerConfig(**config), clock=clock)  # type: ignore[arg-type]


class TestBreakerConfig:
    @pytest.mark.parametrize(
        ("name", "bad"),
        [
            ("failure_threshold", 0),
            ("cooldown_s", -1.0),
            ("success_threshold", 0),
            ("half_open_max_calls", 0),
        ],
    )
    def test_out_of_range_value_names_the_field(self, name, bad):
        with pytest.raises(ValidationError) as info:
            BreakerConfig(**{name: bad})
        assert info.value.errors()[0]["loc"] == (name,)

    def test_success_threshold_must_fit_in_the_probes(self):
        with pytest.raises(ValidationError, match=r"success_threshold=3.*half_open_max_calls=2"):
            BreakerConfig(success_threshold=3, half_open_max_calls=2)

    def test_is_frozen_and_documented(self):
        cfg = BreakerConfig()
        with pytest.raises(ValidationError):
            cfg.cooldown_s = 1
        for name, info in BreakerConfig.model_fields.items():
            assert info.description, name


class TestBreaker:
    def test_opens_after_n_consecutive_failures(self):
        clock = ManualClock()
        b = breaker(clock, failure_threshold=3)
        assert b.record_failure("m") is CLOSED
        assert b.record_failure("m") is CLOSED
        assert b.allow("m")
        assert b.record_failure("m") is OPEN
        assert not b.allow("m")

    def test_a_success_resets_the_failure_count(self):
        b = breaker(ManualClock(), failure_threshold=2)
        b.record_failure("m")
        b.record_success("m")
        assert b.record_failure("m") is CLOSED

    def test_before_call_raises_with_key_retry_at_and_failures(self):
        clock = ManualClock(100.0)
        b = breaker(clock, failure_threshold=2, cooldown_s=30)
        b.record_failure("search")
        b.record_failure("search")
        clock.advance(5)
        with pytest.raises(BreakerOpen) as info:
            b.before_call("search")
        assert (info.value.key, info.value.retry_at, info.value.failures) == ("search", 130.0, 2)
        assert b.retry_at("search") == 130.0
        # Seconds from the refusal, rounded up; never the clock's reading, which means nothing to a person.
        assert info.value.wait_s == 25.0
        assert str(info.value) == "breaker 'search' is open after 2 failures; a probe is allowed in 25 s"

    def test_an_admission_says_whether_it_took_a_probe_slot(self):
        clock = ManualClock()
        b = breaker(clock, failure_threshold=1, cooldown_s=10)
        assert not b.admit("m").probe  # closed: no slot to take
        b.record_failure("m")
        clock.advance(10)
        assert b.admit("m").probe
        assert not b.admit("m").allowed

    def test_a_released_probe_frees_its_slot_and_changes_nothing_else(self):
        clock = ManualClock()
        b = breaker(clock, failure_threshold=1, cooldown_s=10)
        b.record_failure("m")
        clock.advance(10)
        assert b.allow("m") and not b.allow("m")
        assert b.release("m") is None
        assert b.state("m") is HALF
        assert b.allow("m")  # the next call probes at once, not a cool-down later
        assert b.record_success("m") is CLOSED
        b.release("m")  # closed: nothing to give back
        assert b.store.get("m") == b.store.get("never-seen")

    def test_half_open_after_the_cooldown_admits_limited_probes(self):
        clock = ManualClock()
        b = breaker(clock, failure_threshold=1, cooldown_s=10, half_open_max_calls=2)
        b.record_failure("m")
        clock.advance(9.5)
        assert b.state("m") is OPEN and not b.allow("m")
        clock.advance(0.5)
        assert b.state("m") is HALF
        assert b.allow("m") and b.allow("m")
        assert not b.allow("m")
        assert b.retry_at("m") == 20.0

    def test_closes_after_m_probe_successes(self):
        clock = ManualClock()
        b = breaker(clock, failure_threshold=1, cooldown_s=1, success_threshold=2, half_open_max_calls=2)
        b.record_failure("m")
        clock.advance(1)
        assert b.allow("m")
        assert b.record_success("m") is HALF
        assert b.allow("m")
        assert b.record_success("m") is CLOSED
        assert b.store.get("m").failures == 0

    def test_a_half_open_failure_reopens_with_a_fresh_cooldown(self):
        clock = ManualClock()
        b = breaker(clock, failure_threshold=1, cooldown_s=10)
        b.record_failure("m")
        clock.advance(12)
        assert b.allow("m")
        assert b.record_failure("m") is OPEN
        clock.advance(9)
        assert b.state("m") is OPEN  # the cool-down restarted at t=12, not t=0
        clock.advance(1)
        assert b.state("m") is HALF

    def test_a_lost_probe_frees_its_slot_after_a_cooldown(self):
        clock = ManualClock()
        b = breaker(clock, failure_threshold=1, cooldown_s=5)
        b.record_failure("m")
        clock.advance(5)
        assert b.allow("m")  # this probe never reports back
        clock.advance(4)
        assert not b.allow("m")
        clock.advance(1)
        assert b.allow("m")

    def test_outcomes_while_open_do_not_restart_the_cooldown(self):
        clock = ManualClock()
        b = breaker(clock, failure_threshold=1, cooldown_s=5)
        b.record_failure("m")
        clock.advance(3)
        b.record_failure("m")  # a call admitted before it opened
        b.record_success("m")
        clock.advance(2)
        assert b.state("m") is HALF
        assert b.store.get("m").failures == 2

    def test_keys_are_independent_and_listed(self):
        b = breaker(ManualClock(), failure_threshold=1)
        b.record_failure("search")
        b.record_success("calculator")
        assert b.states() == {"calculator": "closed", "search": "open"}
        assert b.state("never-seen") is CLOSED

    def test_reset_closes(self):
        b = breaker(ManualClock(), failure_threshold=1)
        b.record_failure("m")
        b.reset("m")
        assert b.state("m") is CLOSED and b.allow("m")

    def test_store_default_clock_is_used(self, tmp_path):
        assert Breaker().clock is MemoryBreakerStore().default_clock
        with SQLiteBreakerStore(tmp_path / "b.db") as store:
            assert Breaker(store=store).clock is time.time


class TestBreakerAsync:
    @pytest.mark.parametrize("kind", ["memory", "sqlite"])
    def test_async_twins_drive_the_same_machine(self, kind, tmp_path):
        clock = ManualClock()
        store = MemoryBreakerStore() if kind == "memory" else SQLiteBreakerStore(tmp_path / "b.db")
        b = Breaker(BreakerConfig(failure_threshold=2, cooldown_s=1), store=store, clock=clock)

        async def main() -> None:
            assert await b.aallow("m")
            await asyncio.gather(b.arecord_failure("m"), b.arecord_failure("m"))
            assert await b.astate("m") is OPEN
            with pytest.raises(BreakerOpen):
                await b.abefore_call("m")
            clock.advance(1)
            await b.abefore_call("m")
            assert await b.arecord_success("m") is CLOSED
            assert await b.astates() == {"m": "closed"}

        asyncio.run(main())

    def test_concurrent_async_failures_all_count_on_sqlite(self, tmp_path):
        store = SQLiteBreakerStore(tmp_path / "b.db")
        b = Breaker(BreakerConfig(failure_threshold=1000), store=store, clock=ManualClock())

        async def main() -> None:
            await asyncio.gather(*(b.arecord_failure("m") for _ in range(40)))

        asyncio.run(main())
        assert store.get("m").failures == 40
        store.close()


# -- property: transitions follow the state machine -----------------------------------------------


class ModelBreaker:
    """The state machine as the module docstring states it, written out separately."""

    def __init__(self, n: int, cooldown: float, m: int, probes_max: int) -> None:
        self.n, self.cooldown, self.m, self.max = n, cooldown, m, probes_max
        self.state, self.failures, self.opened = "closed", 0, 0.0
        self.probes, self.wins = 0, 0
        self.last_probe: float | None = None

    def tick(self, now: float) -> None:
        if self.state == "open" and now - self.opened >= self.cooldown:
            self.state, self.probes, self.wins, self.last_probe = "half_open", 0, 0, None

    def allow(self, now: float) -> bool:
        self.tick(now)
        if self.state != "half_open":
            return self.state == "closed"
        lost = self.last_probe is not None and now - self.last_probe >= self.cooldown
        if self.probes >= self.max and lost:
            self.probes = self.wins
        if self.probes < self.max:
            self.probes += 1
            self.last_probe = now
            return True
        return False

    def success(self, now: float) -> None:
        self.tick(now)
        if self.state == "closed":
            self.failures = 0
        elif self.state == "half_open":
            self.wins += 1
            if self.wins >= self.m:
                self.state, self.failures = "closed", 0

    def release(self, now: float) -> None:
        self.tick(now)
        if self.state == "half_open" and self.probes > self.wins:
            self.probes -= 1

    def failure(self, now: float) -> None:
        self.tick(now)
        self.failures += 1
        if self.state == "half_open" or (self.state == "closed" and self.failures >= self.n):
            self.state, self.opened = "open", now


events = st.lists(
    st.one_of(
        st.tuples(st.sampled_from(["allow", "success", "failure", "release"]), st.sampled_from(["a", "b"])),
        st.tuples(st.just("advance"), st.integers(0, 6).map(lambda k: k / 2)),
    ),
    min_size=5,
    max_size=60,
)
configs = st.tuples(
    st.integers(1, 4), st.integers(0, 8).map(lambda k: k / 2), st.integers(1, 3), st.integers(0, 2)
).map(lambda t: (t[0], t[1], t[2], t[2] + t[3]))


def check_against_model(store_factory, config, script) -> None:
    n, cooldown, m, probes = config
    clock = ManualClock()
    b = Breaker(
        BreakerConfig(
            failure_threshold=n, cooldown_s=cooldown, success_threshold=m, half_open_max_calls=probes
        ),
        store=store_factory(),
        clock=clock,
    )
    models = {"a": ModelBreaker(n, cooldown, m, probes), "b": ModelBreaker(n, cooldown, m, probes)}
    for kind, arg in script:
        if kind == "advance":
            clock.advance(arg)
        elif kind == "allow":
            assert b.allow(arg) == models[arg].allow(clock.now)
        elif kind == "success":
            b.record_success(arg)
            models[arg].success(clock.now)
        elif kind == "release":
            b.release(arg)
            models[arg].release(clock.now)
        else:
            b.record_failure(arg)
            models[arg].failure(clock.now)
        for key, model in models.items():
            model.tick(clock.now)
            assert b.state(key).value == model.state, (key, kind, arg)


class TestBreakerProperty:
    @settings(max_examples=200, deadline=None)
    @given(config=configs, script=events)
    def test_memory_store_follows_the_state_machine(self, config, script):
        check_against_model(MemoryBreakerStore, config, script)

    @settings(max_examples=25, deadline=None)
    @given(config=configs, script=events)
    def test_sqlite_store_follows_the_state_machine(self, config, script):
        with tempfile.TemporaryDirectory() as tmp:
            stores: list[SQLiteBreakerStore] = []

            def factory() -> SQLiteBreakerStore:
                stores.append(SQLiteBreakerStore(Path(tmp) / "b.db"))
                return stores[-1]

            try:
                check_against_model(factory, config, script)
            finally:
                for store in stores:
                    store.close()


class TestCountsAgainst:
    """Which failures a breaker counts: the target's own faults, never a refusal or the caller's error."""

    @pytest.mark.parametrize(
        ("error_class", "counts"),
        [
            (ErrorClass.TRANSIENT, True),
            (ErrorClass.TERMINAL, True),
            (ErrorClass.VALIDATION, False),
            (ErrorClass.SEMANTIC, False),
        ],
    )
    def test_by_error_class(self, error_class: ErrorClass, counts: bool) -> None:
        assert counts_against(Classification(error_class, "x"), ValueError("x")) is counts

    @pytest.mark.parametrize(
        "refusal",
        [
            BreakerOpen(key="tool", retry_at=0.0, failures=3),
            BreakerStoreError(store="redis://127.0.0.1:6390/0", operation="update", problem="refused"),
        ],
    )
    def test_a_refusal_is_no_failure_of_the_target(self, refusal: Exception) -> None:
        assert not counts_against(Classification(ErrorClass.TERMINAL, "refused"), refusal)
