"""Budgets, usage and the reserve/commit/release ledger, with a property test of its invariant."""

from __future__ import annotations

import asyncio
import threading
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from retryctl.controller._budget import LIMIT_NAMES, Budget, Usage
from retryctl.controller._clock import ManualClock
from retryctl.controller._ledger import Exhaustion, Ledger, Reservation
from retryctl.exceptions import BudgetExceeded, ConfigError, UsageError


def D(x: float) -> Fraction:
    """A number as the decimal it prints as: the ledger's stated accounting unit."""
    return Fraction(str(x))


ADDITIVE = ("attempts", "samples", "input_tokens", "output_tokens", "usd")


class TestBudget:
    def test_every_limit_is_off_by_default(self):
        assert Budget().limits() == dict.fromkeys(LIMIT_NAMES)

    @pytest.mark.parametrize("name", LIMIT_NAMES)
    def test_negative_limit_is_an_error_naming_the_field(self, name):
        with pytest.raises(ValidationError) as info:
            Budget(**{name: -1})
        assert info.value.errors()[0]["loc"] == (name,)
        assert name in str(info.value)

    def test_unknown_field_is_refused(self):
        with pytest.raises(ValidationError, match="tokens"):
            Budget(tokens=5)  # type: ignore[call-arg]

    def test_nan_usd_is_refused(self):
        with pytest.raises(ValidationError, match="usd"):
            Budget(usd=float("nan"))

    def test_is_frozen(self):
        budget = Budget(samples=3)
        with pytest.raises(ValidationError):
            budget.samples = 4

    def test_every_field_has_a_docstring(self):
        for name, info in Budget.model_fields.items():
            assert info.description, name


class TestUsage:
    def test_adds_every_quantity(self):
        total = Usage(attempts=1, samples=2, usd=0.25) + Usage(samples=3, output_tokens=7, usd=0.5)
        assert total == Usage(attempts=1, samples=5, output_tokens=7, usd=0.75)

    def test_negative_amount_names_the_field(self):
        with pytest.raises(ValidationError, match="output_tokens"):
            Usage(output_tokens=-3)


def call(samples: int = 1, usd: float = 0.0, out: int = 0, wall_s: float = 0.0) -> Usage:
    return Usage(attempts=1, samples=samples, output_tokens=out, usd=usd, wall_s=wall_s)


class TestLedger:
    def test_reservation_past_a_run_limit_is_refused_as_data(self):
        ledger = Ledger(Budget(samples=4))
        assert isinstance(ledger.try_reserve(call(samples=3)), Reservation)
        refused = ledger.try_reserve(call(samples=2))
        # Nothing is committed yet: the 3 samples are held by a call in flight, not spent.
        assert refused == Exhaustion(
            limit_name="samples", limit=4, used=0, requested=2, scope="run", step_id=None, reserved=3
        )
        assert refused.value == 5
        assert not refused.spent

    def test_reserve_raises_budget_exceeded_naming_limit_value_and_scope(self):
        ledger = Ledger(Budget(usd=1.0))
        step = ledger.step("plan", budget=Budget(attempts=1))
        step.reserve(call())
        with pytest.raises(BudgetExceeded) as info:
            step.reserve(call())
        err = info.value
        assert (err.limit_name, err.limit, err.value, err.scope) == ("attempts", 1, 2, "step 'plan'")

    def test_step_usage_counts_in_the_run_and_run_limits_bind_steps(self):
        ledger = Ledger(Budget(samples=5))
        a, b = ledger.step("a"), ledger.step("b")
        a.reserve(call(samples=3)).commit(call(samples=3))
        refused = b.try_reserve(call(samples=3))
        assert isinstance(refused, Exhaustion)
        assert refused.scope == "run" and refused.used == 3
        assert ledger.used().samples == 3 and b.used().samples == 0

    def test_commit_below_the_estimate_frees_the_rest(self):
        ledger = Ledger(Budget(output_tokens=100))
        ledger.reserve(call(out=80)).commit(call(out=30))
        assert ledger.remaining().output_tokens == 70
        assert isinstance(ledger.try_reserve(call(out=70)), Reservation)

    def test_release_gives_the_reservation_back(self):
        ledger = Ledger(Budget(samples=2))
        held = ledger.reserve(call(samples=2))
        assert isinstance(ledger.try_reserve(call(samples=1)), Exhaustion)
        held.release()
        assert ledger.snapshot().reserved["samples"] == 0
        assert isinstance(ledger.try_reserve(call(samples=2)), Reservation)

    def test_context_manager_releases_when_the_call_raises(self):
        ledger = Ledger(Budget(samples=1))
        with pytest.raises(RuntimeError), ledger.reserve(call()):
            raise RuntimeError("call failed")
        assert isinstance(ledger.try_reserve(call()), Reservation)

    def test_context_manager_keeps_a_commit(self):
        ledger = Ledger(Budget(samples=1))
        with ledger.reserve(call()) as held:
            held.commit(call())
        assert ledger.used().samples == 1 and held.state == "committed"

    def test_a_reservation_closes_once(self):
        ledger = Ledger()
        held = ledger.reserve(call())
        held.commit(call())
        with pytest.raises(UsageError, match="already committed"):
            held.release()
        with pytest.raises(UsageError, match="already committed"):
            held.commit(call())

    def test_reservation_from_another_run_is_refused(self):
        held = Ledger().reserve(call())
        with pytest.raises(UsageError, match="another run"):
            Ledger().commit(held, call())

    def test_overrun_is_recorded_not_charged(self):
        ledger = Ledger(Budget(output_tokens=100))
        step = ledger.step("s")
        excess = step.reserve(call(out=50)).commit(call(out=80))
        assert excess.output_tokens == 30 and excess.samples == 0
        for snap in (step.snapshot(), ledger.snapshot()):
            assert snap.used["output_tokens"] == 50
            assert snap.overrun["output_tokens"] == 30

    def test_wall_time_comes_from_the_clock(self):
        clock = ManualClock(100.0)
        ledger = Ledger(Budget(wall_s=10), clock=clock)
        clock.advance(4)
        assert isinstance(ledger.try_reserve(call(wall_s=6)), Reservation)
        refused = ledger.try_reserve(call(wall_s=6.5))
        assert isinstance(refused, Exhaustion) and refused.limit_name == "wall_s"
        assert refused.used == 4 and refused.requested == 6.5
        assert ledger.exhausted() is None
        clock.advance(6)
        assert ledger.exhausted() == Exhaustion(limit_name="wall_s", limit=10, used=10, scope="run")
        assert isinstance(ledger.try_reserve(Usage()), Exhaustion)

    def test_step_wall_time_starts_when_the_step_opens(self):
        clock = ManualClock()
        ledger = Ledger(clock=clock)
        clock.advance(30)
        step = ledger.step("late", budget=Budget(wall_s=5))
        clock.advance(2)
        assert step.used().wall_s == 2 and ledger.used().wall_s == 32

    def test_exhausted_reports_the_spent_limit_at_the_tightest_scope(self):
        ledger = Ledger(Budget(samples=10))
        step = ledger.step("s", budget=Budget(samples=2))
        step.reserve(call(samples=2)).commit(call(samples=2))
        spent = step.exhausted()
        assert spent is not None
        assert (spent.limit_name, spent.used, spent.scope, spent.step_id) == (
            "samples",
            2,
            "step 's'",
            "s",
        )
        assert ledger.exhausted() is None

    def test_remaining_is_the_tightest_of_step_and_run(self):
        ledger = Ledger(Budget(samples=10, usd=1.0))
        step = ledger.step("s", budget=Budget(samples=3))
        ledger.reserve(call(samples=8, usd=0.25))
        left = step.remaining()
        assert left.samples == 2 and left.usd == 0.75 and left.attempts is None

    def test_snapshot_names_every_limit(self):
        ledger = Ledger(Budget(usd=2.0))
        step = ledger.step("s")
        step.reserve(call(usd=0.5)).commit(call(usd=0.25))
        snap = step.snapshot()
        assert set(snap.used) == set(snap.limit) == set(LIMIT_NAMES)
        assert snap.used["usd"] == 0.25 and snap.limit["usd"] is None
        assert snap.parent is not None and snap.parent.limit["usd"] == 2.0

    def test_usd_totals_are_exact(self):
        ledger = Ledger(Budget(usd=0.3))
        for _ in range(3):
            ledger.reserve(call(usd=0.1)).commit(call(usd=0.1))
        # In floats 0.1 + 0.1 + 0.1 > 0.3, yet three 0.1 USD calls fit a 0.3 USD budget exactly.
        assert sum([0.1, 0.1, 0.1]) > 0.3
        assert ledger.snapshot().used["usd"] == 0.3
        assert ledger.remaining().usd == 0.0
        assert isinstance(ledger.try_reserve(Usage(usd=0.0)), Reservation)
        assert isinstance(ledger.try_reserve(Usage(usd=1e-9)), Exhaustion)

    def test_step_revisited_keeps_usage_and_refuses_another_budget(self):
        ledger = Ledger(step_budget=Budget(samples=4))
        first = ledger.step("s")
        first.reserve(call()).commit(call())
        assert ledger.step("s") is first and first.budget == Budget(samples=4)
        with pytest.raises(ConfigError, match="budget"):
            ledger.step("s", budget=Budget(samples=9))
        assert list(ledger.steps()) == ["s"]

    def test_threads_never_overbook(self):
        ledger = Ledger(Budget(samples=100))
        granted: list[Reservation] = []
        lock = threading.Lock()

        def worker() -> None:
            for _ in range(60):
                got = ledger.try_reserve(call())
                if isinstance(got, Reservation):
                    with lock:
                        granted.append(got)

        threads = [threading.Thread(target=worker) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert len(granted) == 100
        assert ledger.snapshot().reserved["samples"] == 100

    def test_asyncio_tasks_share_a_ledger(self):
        ledger = Ledger(Budget(attempts=5))

        async def one() -> bool:
            got = ledger.try_reserve(call())
            await asyncio.sleep(0)
            if isinstance(got, Exhaustion):
                return False
            got.commit(call())
            return True

        async def main() -> list[bool]:
            return await asyncio.gather(*(one() for _ in range(12)))

        assert sum(asyncio.run(main())) == 5
        assert ledger.used().attempts == 5


def _usd_refusal() -> Exhaustion:
    """The refusal of the issue: a call whose USD estimate alone passes the limit, nothing spent."""
    prices = {"out": 0.00099, "limit": 0.0005}
    refused = Ledger(Budget(usd=prices["limit"])).try_reserve(Usage(attempts=1, usd=prices["out"]))
    assert isinstance(refused, Exhaustion)
    return refused


def _tokens_refusal() -> Exhaustion:
    """90 output tokens really used of 100; the next call reserves 90 more and is refused."""
    ledger = Ledger().step("s", budget=Budget(output_tokens=100))
    ledger.reserve(call(out=90)).commit(call(out=90))
    refused = ledger.try_reserve(call(out=90))
    assert isinstance(refused, Exhaustion)
    return refused


def _in_flight_refusal() -> Exhaustion:
    """3 samples committed, 4 held by a call still running, and a call of 2 more asked for."""
    ledger = Ledger(Budget(samples=8))
    ledger.reserve(call(samples=3)).commit(call(samples=3))
    ledger.reserve(call(samples=4))
    refused = ledger.try_reserve(call(samples=2))
    assert isinstance(refused, Exhaustion)
    return refused


def _spent_refusal() -> Exhaustion:
    """All 8 samples committed: any further call is refused because the budget is spent."""
    ledger = Ledger().step("solve", budget=Budget(samples=8))
    ledger.reserve(call(samples=8)).commit(call(samples=8))
    refused = ledger.try_reserve(call(samples=1))
    assert isinstance(refused, Exhaustion)
    return refused


def _exhausted() -> Exhaustion:
    ledger = Ledger(Budget(attempts=2))
    for _ in range(2):
        ledger.reserve(call()).commit(call())
    spent = ledger.exhausted()
    assert spent is not None
    return spent


def _wall_refusal() -> Exhaustion:
    clock = ManualClock()
    ledger = Ledger(Budget(wall_s=7), clock=clock)
    clock.advance(3)
    refused = ledger.try_reserve(Usage(attempts=1, wall_s=5))
    assert isinstance(refused, Exhaustion)
    return refused


def _wall_spent() -> Exhaustion:
    clock = ManualClock()
    ledger = Ledger(Budget(wall_s=0.7), clock=clock)
    clock.advance(0.7)
    refused = ledger.try_reserve(Usage(attempts=1))
    assert isinstance(refused, Exhaustion)
    return refused


class TestExhaustion:
    def test_to_exception_carries_the_fields(self):
        spent = Exhaustion(limit_name="usd", limit=1.0, used=0.75, requested=0.5, scope="run")
        err = spent.to_exception()
        assert (err.limit_name, err.limit, err.value, err.scope) == ("usd", 1.0, 1.25, "run")
        assert (err.used, err.reserved, err.requested) == (0.75, 0.0, 0.5)
        assert str(err) == str(spent)

    # Each case is made by a real ledger; the wording must carry the real figures, never an
    # estimate counted as a spend ("is spent (180 of 100)" when 90 were used).
    @pytest.mark.parametrize(
        ("make", "spent", "used", "reserved", "requested", "message"),
        [
            (
                _usd_refusal,
                False,
                0.0,
                0.0,
                0.00099,
                "run budget 'usd' would be exceeded: 0.00099 estimated for this call + 0 spent"
                " > limit 0.0005",
            ),
            (
                _tokens_refusal,
                False,
                90.0,
                0.0,
                90.0,
                "step 's' budget 'output_tokens' would be exceeded: 90 estimated for this call + 90 spent"
                " > limit 100",
            ),
            (
                _in_flight_refusal,
                False,
                3.0,
                4.0,
                2.0,
                "run budget 'samples' would be exceeded: 2 estimated for this call + 3 spent"
                " + 4 held by calls in flight > limit 8",
            ),
            (_spent_refusal, True, 8.0, 0.0, 1.0, "step 'solve' budget 'samples' is spent (8 of 8)"),
            (_exhausted, True, 2.0, 0.0, 0.0, "run budget 'attempts' is spent (2 of 2)"),
            (
                _wall_refusal,
                False,
                3.0,
                0.0,
                5.0,
                "run budget 'wall_s' would be exceeded: up to 5s for this call + 3s elapsed > limit 7s",
            ),
            (_wall_spent, True, 0.7, 0.0, 0.0, "run budget 'wall_s' is spent (0.7 of 0.7)"),
        ],
        ids=[
            "usd-refused",
            "tokens-refused",
            "in-flight",
            "samples-spent",
            "exhausted",
            "wall-refused",
            "wall-spent",
        ],
    )
    def test_says_spent_only_when_committed_use_reached_the_limit(
        self, make, spent, used, reserved, requested, message
    ):
        got = make()
        assert (got.spent, got.used, got.reserved, got.requested) == (spent, used, reserved, requested)
        assert got.value == pytest.approx(used + reserved + requested)
        assert str(got) == message
        assert str(got.to_exception()) == message

    def test_reserve_raises_the_same_wording(self):
        ledger = Ledger(Budget(output_tokens=100))
        ledger.reserve(call(out=90)).commit(call(out=90))
        with pytest.raises(BudgetExceeded) as info:
            ledger.reserve(call(out=90))
        assert str(info.value) == (
            "run budget 'output_tokens' would be exceeded: 90 estimated for this call + 90 spent > limit 100"
        )
        assert not info.value.spent

    def test_an_error_built_with_a_bare_value_keeps_its_old_wording(self):
        err = BudgetExceeded(limit_name="samples", limit=8, value=9, scope="run")
        assert str(err) == "run budget 'samples' exceeded: 9 > limit 8"
        assert err.used is None and not err.spent

    def test_an_exhaustion_saved_before_reserved_existed_still_loads(self):
        # A checkpoint written by an earlier version stores the dataclass without ``reserved``.
        old: dict[str, Any] = {
            "limit_name": "samples",
            "limit": 8,
            "used": 8,
            "scope": "run",
            "requested": 1,
            "step_id": None,
        }
        assert str(Exhaustion(**old)) == "run budget 'samples' is spent (8 of 8)"


ONE_ATTEMPT = Usage(attempts=1)


class TestLedgerExtend:
    """``extend``: a person's ``extend`` answer to ``ask_user`` raises limits; accounting goes on."""

    def test_limits_rise_exactly_and_an_off_limit_stays_off(self):
        ledger = Ledger(Budget(usd=0.3, attempts=1))
        ledger.extend(Usage(usd=0.1, attempts=2, samples=3))
        assert ledger.budget == Budget(usd=0.4, attempts=3)
        assert not isinstance(ledger.try_reserve(Usage(usd=0.4, attempts=3)), Exhaustion)

    def test_what_was_used_before_still_counts(self):
        ledger = Ledger(Budget(attempts=1))
        ledger.reserve(ONE_ATTEMPT).commit(ONE_ATTEMPT)
        assert isinstance(ledger.try_reserve(ONE_ATTEMPT), Exhaustion)
        ledger.extend(Usage(attempts=1))
        ledger.reserve(ONE_ATTEMPT).commit(ONE_ATTEMPT)
        snap = ledger.snapshot()
        assert (snap.used["attempts"], snap.limit["attempts"]) == (2, 2)
        assert isinstance(ledger.try_reserve(ONE_ATTEMPT), Exhaustion)

    def test_a_step_raises_its_own_and_its_runs_limits(self):
        ledger = Ledger(Budget(attempts=5, samples=2))
        step = ledger.step("tools", budget=Budget(attempts=0))
        step.extend(Usage(attempts=1, samples=1))
        assert step.budget == Budget(attempts=1)  # the step has no samples limit: it stays off
        assert ledger.budget == Budget(attempts=6, samples=3)
        assert isinstance(step.try_reserve(ONE_ATTEMPT), Reservation)

    def test_a_spent_wall_clock_runs_again_once_wall_s_is_raised(self):
        clock = ManualClock()
        ledger = Ledger(Budget(wall_s=10, attempts=5), clock=clock)
        clock.advance(11)
        assert ledger.exhausted() is not None
        ledger.extend(Usage(attempts=1))  # more attempts do not buy more time
        refused = ledger.try_reserve(ONE_ATTEMPT)
        assert isinstance(refused, Exhaustion) and refused.limit_name == "wall_s"
        ledger.extend(Usage(wall_s=60))
        assert ledger.exhausted() is None
        assert ledger.remaining().wall_s == 59
        assert isinstance(ledger.try_reserve(ONE_ATTEMPT), Reservation)


# -- property: no committed total ever passes its limit -------------------------------------------

limits = st.one_of(st.none(), st.integers(0, 12))
usd_limits = st.one_of(st.none(), st.floats(0, 2, allow_nan=False))
budgets = st.builds(
    Budget,
    attempts=limits,
    samples=limits,
    output_tokens=st.one_of(st.none(), st.integers(0, 400)),
    usd=usd_limits,
    wall_s=st.one_of(st.none(), st.floats(0, 20, allow_nan=False)),
)
usages = st.builds(
    Usage,
    attempts=st.integers(0, 2),
    samples=st.integers(0, 4),
    output_tokens=st.integers(0, 150),
    usd=st.floats(0, 0.7, allow_nan=False),
    wall_s=st.floats(0, 5, allow_nan=False),
)
ops = st.lists(
    st.one_of(
        st.tuples(st.just("reserve"), st.integers(0, 2), usages),
        st.tuples(st.just("commit"), st.integers(0, 50), usages),
        st.tuples(st.just("release"), st.integers(0, 50), st.none()),
        st.tuples(st.just("advance"), st.floats(0, 6, allow_nan=False), st.none()),
    ),
    min_size=8,
    max_size=40,
)


class TestLedgerCarry:
    """What a run spent before this process met it, counted again from its record."""

    def test_carried_use_is_committed_at_the_step_and_the_run(self) -> None:
        run = Ledger(Budget(attempts=10))
        step = run.step("s", budget=Budget(attempts=5, usd=1.0))
        step.carry({"attempts": 3, "usd": 0.1, "samples": 0, "wall_s": 40.0})
        assert step.snapshot().used["attempts"] == 3 and run.snapshot().used["attempts"] == 3
        assert step.snapshot().used["usd"] == 0.1
        assert step.snapshot().used["wall_s"] < 40.0  # wall time is the clock's, never an amount
        assert isinstance(step.try_reserve(Usage(attempts=2)), Reservation)
        assert isinstance(step.try_reserve(Usage(attempts=1)), Exhaustion)  # 3 carried + 2 held = 5

    def test_use_above_a_lowered_limit_counts_as_that_limit_spent(self) -> None:
        ledger = Ledger(Budget(attempts=4, usd=0.3))
        ledger.carry({"attempts": 7, "usd": 0.5})
        snap = ledger.snapshot()
        assert (snap.used["attempts"], snap.used["usd"]) == (4, 0.3)
        assert snap.overrun["attempts"] == 0
        spent = ledger.exhausted()
        assert spent is not None and spent.limit_name == "attempts" and spent.spent

    def test_the_tightest_limit_of_the_chain_caps_the_carry(self) -> None:
        run = Ledger(Budget(samples=6))
        step = run.step("s", budget=Budget(samples=20))
        step.carry({"samples": 9})
        assert step.snapshot().used["samples"] == 6 and run.snapshot().used["samples"] == 6


@dataclass
class ModelScope:
    """The test's own account of one scope: exact sums, kept apart from the ledger."""

    budget: Budget
    start: float
    committed: dict[str, Fraction] = field(default_factory=lambda: dict.fromkeys(ADDITIVE, Fraction(0)))
    reserved: dict[str, Fraction] = field(default_factory=lambda: dict.fromkeys(ADDITIVE, Fraction(0)))

    def fits(self, est: Usage, now: float) -> bool:
        for n in ADDITIVE:
            limit = getattr(self.budget, n)
            if limit is not None and self.committed[n] + self.reserved[n] + D(getattr(est, n)) > D(limit):
                return False
        wall = self.budget.wall_s
        elapsed = now - self.start
        return wall is None or (elapsed < wall and elapsed + est.wall_s <= wall)


class TestLedgerProperty:
    @settings(max_examples=150, deadline=None)
    @given(run_budget=budgets, step_budgets=st.tuples(budgets, budgets), script=ops)
    def test_committed_never_exceeds_a_limit(self, run_budget, step_budgets, script):
        clock = ManualClock()
        ledger = Ledger(run_budget, clock=clock)
        run_model = ModelScope(run_budget, 0.0)
        steps: dict[int, tuple[object, ModelScope]] = {}
        open_: list[tuple[Reservation, list[ModelScope], Usage]] = []

        def scope(i: int):
            if i == 0:
                return ledger, [run_model]
            if i not in steps:
                b = step_budgets[i - 1]
                steps[i] = (ledger.step(f"s{i}", budget=b), ModelScope(b, clock.now))
            led, model = steps[i]
            return led, [model, run_model]

        for op, arg, usage in script:
            if op == "reserve":
                led, chain = scope(arg)
                expect_ok = all(m.fits(usage, clock.now) for m in chain)
                got = led.try_reserve(usage)
                assert isinstance(got, Reservation) == expect_ok, (got, usage)
                if expect_ok:
                    for m in chain:
                        for n in ADDITIVE:
                            m.reserved[n] += D(getattr(usage, n))
                    open_.append((got, chain, usage))
            elif op in ("commit", "release") and open_:
                held, chain, est = open_.pop(arg % len(open_))
                for m in chain:
                    for n in ADDITIVE:
                        m.reserved[n] -= D(getattr(est, n))
                        if op == "commit":
                            m.committed[n] += min(D(getattr(usage, n)), D(getattr(est, n)))
                if op == "commit":
                    held.commit(usage)
                else:
                    held.release()
            elif op == "advance":
                clock.advance(arg)

            all_scopes = [(ledger, run_model)] + [steps[i] for i in sorted(steps)]
            for led, model in all_scopes:
                snap = led.snapshot()  # type: ignore[attr-defined]
                for n in ADDITIVE:
                    limit = model.budget.limits()[n]
                    assert snap.used[n] == float(model.committed[n])
                    assert snap.reserved[n] == float(model.reserved[n])
                    if limit is not None:
                        assert D(snap.used[n]) <= D(limit)
                        assert model.committed[n] + model.reserved[n] <= D(limit)
