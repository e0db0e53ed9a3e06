"""A verdict that needs an attempt reserves it first: ``decide`` gives a retry, switch or refine only if
the ledgers can pay for the attempt it calls for (its estimate, and a retry's wait), else the budget
verdict at once. Plain data only: ledgers' snapshots, classified errors, the engine's requests."""

from __future__ import annotations

from typing import Any

import pytest

from retryctl.controller import (
    Act,
    Action,
    Ask,
    AttemptEngine,
    Budget,
    Classification,
    ErrorClass,
    Extend,
    Finish,
    Ledger,
    ManualClock,
    Observation,
    Policy,
    Sleep,
    StopDecision,
    Tally,
    Usage,
    UserReply,
    decide,
)
from retryctl.controller._afford import refusal


def _rate_limited(retry_after: float | None = 3.0) -> Classification:
    return Classification(ErrorClass.TRANSIENT, "HTTP 429", retry_after_s=retry_after, status_code=429)


def _spent(budget: Budget, used: Usage | None = None, *, clock: ManualClock | None = None) -> Ledger:
    ledger = Ledger(budget, clock=clock or ManualClock())
    if used is not None:
        ledger.reserve(used).commit(used)
    return ledger


def _split(**kw: Any) -> Observation:
    """Four disagreeing samples: a low confidence, so the ladder (switch, refine...) applies."""
    tally = Tally.of(["12", "13", "12", "14"])
    return Observation(target="a", tally=tally, stop=StopDecision(False, 0.4, "split", "default"), **kw)


class TestRefusal:
    def test_a_cost_that_fits_every_scope_is_not_refused(self) -> None:
        run = _spent(Budget(attempts=3), Usage(attempts=1))
        step = run.step("s", budget=Budget(attempts=2))
        assert refusal([step.snapshot()], Usage(attempts=1)) is None

    def test_the_run_above_a_step_refuses_naming_its_scope(self) -> None:
        run = Ledger(Budget(usd=0.5), clock=ManualClock())
        step = run.step("s", budget=Budget(attempts=5))
        step.reserve(Usage(attempts=1, usd=0.4)).commit(Usage(attempts=1, usd=0.4))
        refused = refusal([step.snapshot()], Usage(attempts=1, usd=0.2))
        assert refused is not None and (refused.scope, refused.limit_name) == ("run", "usd")
        assert (
            str(refused)
            == "run budget 'usd' would be exceeded: 0.2 estimated for this call + 0.4 spent > limit 0.5"
        )

    def test_amounts_compare_exactly_as_the_ledger_does(self) -> None:
        ledger = _spent(Budget(usd=0.3), Usage(usd=0.1))
        ledger.reserve(Usage(usd=0.1)).commit(Usage(usd=0.1))
        assert refusal([ledger.snapshot()], Usage(usd=0.1)) is None  # 0.1 + 0.1 + 0.1 is 0.3
        assert ledger.try_reserve(Usage(usd=0.1)) is not None

    def test_calls_in_flight_hold_their_share(self) -> None:
        ledger = Ledger(Budget(samples=8), clock=ManualClock())
        ledger.reserve(Usage(samples=6))  # another call, still running
        refused = refusal([ledger.snapshot()], Usage(samples=3))
        assert refused is not None and refused.reserved == 6

    def test_a_wait_is_wall_time_the_attempt_must_still_find_left(self) -> None:
        clock = ManualClock()
        ledger = Ledger(Budget(wall_s=10), clock=clock)
        clock.advance(6)
        assert refusal([ledger.snapshot()], Usage(attempts=1), wait_s=3.9) is None
        refused = refusal([ledger.snapshot()], Usage(attempts=1), wait_s=4)
        assert refused is not None and refused.limit_name == "wall_s"

    def test_each_of_several_ledgers_is_asked(self) -> None:
        step = _spent(Budget(samples=10))
        run = _spent(Budget(samples=4), Usage(samples=3))
        refused = refusal([step.snapshot(), run.snapshot()], Usage(samples=2))
        assert refused is not None and refused.used == 3


class TestDecideReservesTheNextAttempt:
    def test_the_last_attempt_s_429_is_a_stop_not_a_retry(self) -> None:
        ledger = _spent(Budget(attempts=2), Usage(attempts=2))
        verdict = decide(Observation(target="api", error=_rate_limited(), ledgers=[ledger.snapshot()]))
        assert verdict.action is Action.STOP and verdict.retry_after_s is None
        assert verdict.reason == (
            "run budget 'attempts' is spent (2 of 2); the retry it called for was not started "
            "(transient fault from 'api' (HTTP 429); retry 1 of 3, retry after 3s)"
        )

    def test_a_retry_the_ledger_can_pay_for_is_given(self) -> None:
        ledger = _spent(Budget(attempts=2), Usage(attempts=1))
        verdict = decide(Observation(target="api", error=_rate_limited(), ledgers=[ledger.snapshot()]))
        assert verdict.action is Action.RETRY and verdict.retry_after_s == 3.0

    def test_without_ledgers_nothing_is_checked_ahead(self) -> None:
        verdict = decide(Observation(target="api", error=_rate_limited(), budget_used={"attempts": 2}))
        assert verdict.action is Action.RETRY

    def test_the_policy_may_ask_to_extend_instead(self) -> None:
        ledger = _spent(Budget(attempts=2), Usage(attempts=2))
        obs = Observation(target="api", error=_rate_limited(), ledgers=[ledger.snapshot()])
        verdict = decide(obs, Policy(on_budget_exhausted="ask_user"))
        assert verdict.action is Action.ASK_USER
        assert verdict.reason.startswith("run budget 'attempts' is spent (2 of 2); the retry it called for")
        assert verdict.reason.endswith("; asking the user whether to extend it")

    def test_a_switch_is_priced_at_the_member_it_goes_to(self) -> None:
        ledger = _spent(Budget(usd=1.0), Usage(usd=0.8))
        error = Classification(ErrorClass.TERMINAL, "model deleted")
        costly = {"b": Usage(attempts=1, usd=0.5)}
        obs = Observation(target="a", alternatives=["b"], error=error, ledgers=[ledger.snapshot()])
        stopped = decide(Observation(**{**obs.__dict__, "next_cost": costly}))
        assert (
            stopped.action is Action.STOP
            and "budget 'usd' would be exceeded: 0.5 estimated" in stopped.reason
        )
        cheap = {"a": Usage(attempts=1, usd=0.5), "b": Usage(attempts=1, usd=0.1)}
        switched = decide(Observation(**{**obs.__dict__, "next_cost": cheap}))
        assert switched.action is Action.SWITCH and switched.switch_to == "b"

    def test_a_refine_needs_its_samples(self) -> None:
        ledger = _spent(Budget(samples=6), Usage(samples=4))
        obs = _split(ledgers=[ledger.snapshot()], next_cost={"a": Usage(attempts=1, samples=3)})
        verdict = decide(obs)
        assert verdict.action is Action.STOP
        assert verdict.reason.startswith(
            "run budget 'samples' would be exceeded: 3 estimated for this call + 4 spent > limit 6; "
            "the refine it called for was not started (confidence 0.40 < threshold 0.80"
        )
        # The low confidence is still the verdict's evidence: only the action changed.
        assert verdict.confidence == pytest.approx(0.4)

    def test_an_accept_needs_nothing_more(self) -> None:
        ledger = _spent(Budget(attempts=1), Usage(attempts=1))
        tally = Tally.of(["12"] * 4)
        obs = Observation(
            tally=tally, stop=StopDecision(True, 0.97, "unanimous", "default"), ledgers=[ledger.snapshot()]
        )
        assert decide(obs).action is Action.ACCEPT

    @pytest.mark.parametrize(("alternatives", "action"), [(["b"], Action.SWITCH), ([], Action.STOP)])
    def test_a_backoff_that_outlasts_the_wall_time_left_is_not_waited(
        self, alternatives: list[str], action: Action
    ) -> None:
        clock = ManualClock()
        ledger = Ledger(Budget(wall_s=10), clock=clock)
        clock.advance(8)
        obs = Observation(
            target="a",
            alternatives=alternatives,
            error=_rate_limited(None),
            ledgers=[ledger.snapshot()],
            backoff_s=2.5,
        )
        verdict = decide(obs)
        assert verdict.action is action
        assert (
            "would be retried after a wait of 2.5s, but only 2s of the wall_s budget is left"
            in verdict.reason
        )


class TestTheEngineNeverWaitsForAStop:
    def test_a_retry_whose_backoff_the_wall_budget_cannot_pay_is_never_slept(self) -> None:
        clock = ManualClock()
        ledger = Ledger(Budget(wall_s=10), clock=clock)
        asked: list[tuple[int, float | None]] = []

        def backoff(n: int, retry_after_s: float | None) -> float:
            asked.append((n, retry_after_s))
            return 4.0 * n

        engine = AttemptEngine(backoff=backoff)
        state, _ = engine.start(["api"])
        requests = []
        for _ in range(3):
            clock.advance(2)
            verdict = engine.judge(state, error=_rate_limited(None), ledgers=[ledger.snapshot()])
            state, request = engine.after(state, verdict, wall_left_s=ledger.remaining().wall_s)
            requests.append(request)
            if not isinstance(request, Sleep):
                break
            clock.advance(request.seconds)
        # 2 s elapsed: a 4 s wait fits; 8 s elapsed: an 8 s wait does not, and is not taken.
        assert [type(r).__name__ for r in requests] == ["Sleep", "Finish"]
        assert isinstance(requests[0], Sleep) and requests[0].seconds == 4.0
        finish = requests[1]
        assert isinstance(finish, Finish) and finish.status == "stopped"
        assert "a wait of 8s, but only 2s of the wall_s budget is left" in finish.verdict.reason
        # decide was told the wait ``after`` then slept (retry 1), and the one it would have slept.
        assert asked == [(1, None), (1, None), (2, None)]

    def test_an_extension_makes_the_switch_the_budget_held_back(self) -> None:
        engine = AttemptEngine(policy=Policy(on_budget_exhausted="ask_user"))
        ledger = _spent(Budget(attempts=1), Usage(attempts=1))
        state, _ = engine.start(["a", "b"])
        error = Classification(ErrorClass.TERMINAL, "model deleted")
        verdict = engine.judge(state, error=error, ledgers=[ledger.snapshot()])
        assert verdict.action is Action.ASK_USER and verdict.switch_to == "b"
        state, request = engine.after(state, verdict)
        assert isinstance(request, Ask)
        state, decided, extended = engine.reply(
            state, verdict, UserReply(action="extend", budget={"attempts": 1})
        )
        assert decided.action is Action.RETRY
        assert isinstance(extended, Extend) and extended.then == Act(target="b", attempt=2)
        assert (state.target, state.tried, state.switches) == ("b", ("a",), 1)

    def test_an_extension_makes_the_refine_the_budget_held_back(self) -> None:
        engine = AttemptEngine(policy=Policy(on_budget_exhausted="ask_user", low_confidence=("refine",)))
        ledger = _spent(Budget(samples=4), Usage(samples=4))
        state, _ = engine.start(["a"])
        obs = _split()
        verdict = engine.judge(
            state,
            tally=obs.tally,
            stop=obs.stop,
            ledgers=[ledger.snapshot()],
            next_cost={"a": Usage(samples=4)},
        )
        assert verdict.action is Action.ASK_USER and verdict.feedback is not None
        state, _, extended = engine.reply(
            state, verdict, UserReply(action="extend", budget={"samples": 4}), previous="12 or 13"
        )
        assert isinstance(extended, Extend) and extended.then.target == "a"
        assert state.refines == 1
        assert [(f.previous, f.feedback) for f in extended.then.feedback] == [("12 or 13", verdict.feedback)]
