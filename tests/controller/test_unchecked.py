"""Unchecked is not certain: a verdict on a result no check ran on (only that the call returned) claims
no confidence and says so, while the policy accepts it exactly where it did."""

from __future__ import annotations

import pytest

from retryctl.controller import (
    Action,
    AttemptEngine,
    Classification,
    ErrorClass,
    Observation,
    Policy,
    Signal,
    StopDecision,
    Tally,
    UserReply,
    ValidatorResult,
    decide,
    reply_verdict,
)

RETURNED = ValidatorResult("call_succeeded", True, check=False)
TOOL_POLICY = Policy(weights={"validators": 1.0})
MODEL_POLICY = Policy(weights={"validators": 1.0, "agreement": 1.0})


class TestUncheckedVerdicts:
    @pytest.mark.parametrize("policy", [TOOL_POLICY, MODEL_POLICY], ids=["tool", "model"])
    def test_a_plain_success_is_accepted_unchecked(self, policy: Policy) -> None:
        verdict = decide(Observation(target="multiply", validators=[RETURNED]), policy)
        assert verdict.action is Action.ACCEPT  # accepted where it was
        assert (verdict.checked, verdict.confidence) == (False, None)
        assert verdict.reason == "accepted unchecked: no check ran on the result of 'multiply'"
        assert str(verdict) == "accept: accepted unchecked: no check ran on the result of 'multiply'"
        # The driver's "it returned" mark is no signal a reader should take for a passed check.
        assert verdict.evidence.signals == {} and verdict.evidence.weights == {}
        assert "no check ran: the call returned" in " ".join(verdict.evidence.notes)

    def test_a_validator_that_checks_makes_it_checked(self) -> None:
        positive = ValidatorResult("positive", True)
        verdict = decide(Observation(target="multiply", validators=[RETURNED, positive]), TOOL_POLICY)
        assert (verdict.action, verdict.checked, verdict.confidence) == (Action.ACCEPT, True, 1.0)
        assert verdict.reason == "confidence 1.00 >= threshold 0.80"

    @pytest.mark.parametrize(
        ("answers", "signals", "checked"),
        [
            (["42"], (), False),  # one sample agrees with nothing
            (["42", "42"], (), True),  # two samples agreeing are a check
            (["42"], (Signal("token_confidence", 0.95),), True),
            (["42"], (Signal.unavailable("token_confidence", "no logprobs"),), False),
            (["42"], (Signal("verifier", 0.9),), True),
        ],
        ids=["one-sample", "two-samples", "token-confidence", "no-logprobs", "verifier"],
    )
    def test_what_counts_as_a_check(
        self, answers: list[str], signals: tuple[Signal, ...], checked: bool
    ) -> None:
        tally = Tally.of(answers)
        obs = Observation(
            target="m", tally=tally, stop=StopDecision(True, 0.95, "x", "default"), signals=signals
        )
        verdict = decide(obs)
        assert verdict.action is Action.ACCEPT
        assert verdict.checked is checked
        assert (verdict.confidence is None) is not checked
        assert verdict.reason.startswith("accepted unchecked") is not checked

    def test_an_unchecked_low_value_goes_down_the_ladder_saying_so(self) -> None:
        obs = Observation(target="m", tally=Tally.of(["42"]), stop=StopDecision(True, 0.5, "x", "default"))
        verdict = decide(obs, Policy(low_confidence=("stop",)))
        assert (verdict.action, verdict.checked, verdict.confidence) == (Action.STOP, False, None)
        assert verdict.reason.startswith(
            "unchecked (no check ran on the result of 'm'): confidence 0.50 < threshold 0.80"
        )

    def test_verdicts_on_an_error_judge_no_result(self) -> None:
        error = Classification(ErrorClass.TRANSIENT, "HTTP 503")
        verdict = decide(Observation(target="m", error=error))
        assert (verdict.action, verdict.checked, verdict.confidence) == (Action.RETRY, True, None)

    def test_a_person_accepting_is_a_check(self) -> None:
        asked = decide(Observation(target="m", validators=[RETURNED]), Policy(weights={"validators": 1.0}))
        accepted = reply_verdict(UserReply(action="accept"), asked)
        assert (accepted.action, accepted.checked, accepted.confidence) == (Action.ACCEPT, True, None)

    def test_the_engine_keeps_an_unchecked_verdict_for_the_same_plain_outcome(self) -> None:
        engine = AttemptEngine(policy=TOOL_POLICY)
        state, _ = engine.start(["multiply"])
        first = engine.judge(state, validators=[RETURNED])
        assert engine.judge(state, validators=[RETURNED]) is first and not first.checked
        # A result that only differs in being a check is another outcome.
        checked = engine.judge(state, validators=[ValidatorResult("call_succeeded", True)])
        assert checked is not first and checked.checked
