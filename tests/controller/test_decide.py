import math

import pydantic
import pytest
from hypothesis import given
from hypothesis import strategies as st

from retryctl.controller._decide import Observation, decide
from retryctl.controller._errors import Classification, ErrorClass
from retryctl.controller._ledger import Exhaustion
from retryctl.controller._policy import Policy
from retryctl.controller._signals import Signal, ValidatorResult
from retryctl.controller._verdict import Action, Verdict
from retryctl.controller.stopping import StopDecision, Tally


def _transient(retry_after: float | None = None) -> Classification:
    return Classification(ErrorClass.TRANSIENT, "HTTP 503", retry_after_s=retry_after, status_code=503)


def _agreeing(n: int = 4) -> Observation:
    tally = Tally.of(["12"] * n)
    return Observation(target="model", tally=tally, stop=StopDecision(True, 0.97, "unanimous", "default"))


class TestDecideAccept:
    def test_agreeing_candidates_are_accepted_with_evidence(self):
        verdict = decide(_agreeing())
        assert verdict.action is Action.ACCEPT
        assert verdict.answer == "12"
        assert verdict.confidence == pytest.approx(0.97)
        assert verdict.evidence.signals["agreement"] == pytest.approx(0.97)
        assert verdict.evidence.thresholds["accept"] == 0.8
        assert verdict.evidence.stopping["rule"] == "default"

    def test_single_sample_without_posterior_uses_raw_share(self):
        verdict = decide(Observation(tally=Tally.of(["a", "b"])))
        assert verdict.evidence.signals["agreement"] == 0.5
        assert verdict.action is not Action.ACCEPT


class TestDecideLowConfidence:
    def _split(self, **kw) -> Observation:
        tally = Tally.of(["12", "13", "12", "14"])
        stop = StopDecision(False, 0.4, "split vote", "default")
        return Observation(target="model", tally=tally, stop=stop, **kw)

    def test_switches_to_first_alternative_whose_breaker_is_closed(self):
        obs = self._split(alternatives=("calculator", "python"), breakers={"calculator": "open"})
        verdict = decide(obs)
        assert verdict.action is Action.SWITCH
        assert verdict.switch_to == "python"
        assert "0.40" in verdict.reason and "python" in verdict.reason

    def test_refines_with_feedback_when_no_alternative(self):
        verdict = decide(self._split())
        assert verdict.action is Action.REFINE
        assert verdict.feedback and "agreement 0.40" in verdict.feedback

    @pytest.mark.parametrize(
        ("signals", "parts", "feedback"),
        [
            # Split votes from a sure model: the disagreement pulled confidence down, and is named.
            (
                (Signal("token_confidence", 0.95),),
                "token_confidence 0.95, agreement 0.40",
                "Your answers were not consistent enough (token_confidence 0.95, agreement 0.40). "
                "Re-check each step and give one final answer.",
            ),
            # An unsure model: its weakest signal is named, not a disagreement it did not have.
            (
                (Signal("token_confidence", 0.10),),
                "token_confidence 0.10, agreement 0.40",
                "Your answer was not trusted: confidence {conf} < threshold 0.80, weakest signal "
                "token_confidence 0.10 (the model was unsure of its own words). "
                "Re-check each step and give one final answer.",
            ),
            (
                (Signal("verifier", 0.05),),
                "verifier 0.05, agreement 0.40",
                "Your answer was not trusted: confidence {conf} < threshold 0.80, weakest signal "
                "verifier 0.05 (the verifier doubted the answer). "
                "Re-check each step and give one final answer.",
            ),
        ],
        ids=["disagreement", "unsure-model", "verifier"],
    )
    def test_feedback_names_the_weakest_signal(self, signals, parts, feedback):
        verdict = decide(self._split(signals=signals, validators=(ValidatorResult("ok", True),)))
        assert verdict.action is Action.REFINE
        conf = f"{verdict.confidence:.2f}"
        # Passed validators carry no weight: evidence keeps them, the sentences do not pad with them.
        assert verdict.evidence.signals["validators"] == 1.0
        assert verdict.reason == f"confidence {conf} < threshold 0.80 ({parts}); refine 1 of 2"
        assert verdict.feedback == feedback.format(conf=conf)

    def test_asks_user_when_refines_are_spent(self):
        verdict = decide(self._split(refines=2))
        assert verdict.action is Action.ASK_USER

    def test_stops_when_ladder_is_exhausted(self):
        policy = Policy(low_confidence=("refine",))
        verdict = decide(self._split(refines=2), policy)
        assert verdict.action is Action.STOP
        assert "nothing left" in verdict.reason

    def test_max_switches_is_honoured(self):
        policy = Policy(max_switches=1, low_confidence=("switch", "ask_user"))
        verdict = decide(self._split(alternatives=("calculator",), switches=1), policy)
        assert verdict.action is Action.ASK_USER

    def test_no_candidates_at_all_escalates(self):
        assert decide(Observation(target="model")).action is Action.REFINE


class TestDecideErrors:
    def test_transient_fault_is_retried_with_retry_after(self):
        verdict = decide(Observation(target="api", error=_transient(2.0), retries=1))
        assert verdict.action is Action.RETRY
        assert verdict.retry_after_s == 2.0
        assert "retry 2 of 3" in verdict.reason
        assert verdict.evidence.error_class == "transient"

    def test_transient_fault_past_max_retries_switches(self):
        obs = Observation(target="api", error=_transient(), retries=3, alternatives=("backup",))
        verdict = decide(obs)
        assert verdict.action is Action.SWITCH and verdict.switch_to == "backup"

    def test_transient_fault_past_max_retries_without_alternative_stops(self):
        verdict = decide(Observation(target="api", error=_transient(), retries=3))
        assert verdict.action is Action.STOP

    def test_open_breaker_switches_even_for_transient(self):
        obs = Observation(
            target="api", error=_transient(), breakers={"api": "open"}, alternatives=("backup",)
        )
        verdict = decide(obs)
        assert verdict.action is Action.SWITCH
        assert "breaker" in verdict.reason

    def test_validation_error_refines_naming_the_problem(self):
        error = Classification(ErrorClass.VALIDATION, "field 'expression' is required")
        verdict = decide(Observation(target="calculator", error=error))
        assert verdict.action is Action.REFINE
        assert verdict.feedback and "expression" in verdict.feedback
        assert "Traceback" not in verdict.feedback

    def test_terminal_error_without_alternative_stops(self):
        error = Classification(ErrorClass.TERMINAL, "HTTP 401", status_code=401)
        verdict = decide(Observation(target="api", error=error))
        assert verdict.action is Action.STOP
        assert "401" in verdict.reason


class TestDecideValidators:
    def test_failed_validator_refines_with_its_evidence(self):
        obs = _agreeing()
        obs = Observation(
            target=obs.target,
            tally=obs.tally,
            stop=obs.stop,
            validators=(ValidatorResult("is_positive", False, "got -3"),),
        )
        verdict = decide(obs)
        assert verdict.action is Action.REFINE
        assert verdict.feedback and "is_positive: got -3" in verdict.feedback


class TestDecideBudget:
    def test_spent_budget_stops_naming_limit_and_value(self):
        spent = Exhaustion(limit_name="samples", limit=8, used=8, scope="step 's1'")
        obs = Observation(tally=Tally.of(["a"]), exhausted=spent)
        verdict = decide(obs)
        assert verdict.action is Action.STOP
        assert "'samples'" in verdict.reason and "8 of 8" in verdict.reason

    @pytest.mark.parametrize(
        ("exhausted", "reason"),
        [
            (
                Exhaustion(limit_name="usd", limit=0.0005, used=0.0, requested=0.00099, scope="run"),
                "run budget 'usd' would be exceeded: 0.00099 estimated for this call + 0 spent"
                " > limit 0.0005",
            ),
            (
                Exhaustion(limit_name="output_tokens", limit=100, used=90, requested=90, scope="step 's'"),
                "step 's' budget 'output_tokens' would be exceeded: 90 estimated for this call + 90 spent"
                " > limit 100",
            ),
            (
                Exhaustion(limit_name="samples", limit=8, used=3, reserved=4, requested=2, scope="run"),
                "run budget 'samples' would be exceeded: 2 estimated for this call + 3 spent"
                " + 4 held by calls in flight > limit 8",
            ),
            (
                Exhaustion(limit_name="samples", limit=8, used=8, requested=1, scope="step 'solve'"),
                "step 'solve' budget 'samples' is spent (8 of 8)",
            ),
            (
                Exhaustion(limit_name="wall_s", limit=7, used=3, requested=5, scope="run"),
                "run budget 'wall_s' would be exceeded: up to 5s for this call + 3s elapsed > limit 7s",
            ),
        ],
        ids=["usd-refused", "tokens-refused", "in-flight", "samples-spent", "wall-refused"],
    )
    def test_reason_tells_a_refused_estimate_from_a_spent_budget(self, exhausted, reason):
        assert decide(Observation(exhausted=exhausted)).reason == reason
        asked = decide(Observation(exhausted=exhausted), Policy(on_budget_exhausted="ask_user"))
        assert asked.reason == f"{reason}; asking the user whether to extend it"

    def test_spent_budget_can_ask_to_extend(self):
        spent = Exhaustion(limit_name="usd", limit=0.5, used=0.5, scope="run")
        verdict = decide(Observation(exhausted=spent), Policy(on_budget_exhausted="ask_user"))
        assert verdict.action is Action.ASK_USER
        assert "extend" in verdict.reason

    def test_budget_beats_a_confident_answer(self):
        spent = Exhaustion(limit_name="attempts", limit=3, used=3, scope="run")
        obs = _agreeing()
        obs = Observation(tally=obs.tally, stop=obs.stop, exhausted=spent)
        assert decide(obs).action is Action.STOP


class TestDecideVerifierDegradation:
    def test_unavailable_verifier_is_said_in_evidence(self):
        obs = _agreeing()
        obs = Observation(
            tally=obs.tally,
            stop=obs.stop,
            signals=(Signal.unavailable("verifier", "verifier timed out after 1s"),),
        )
        verdict = decide(obs)
        assert verdict.action is Action.ACCEPT
        assert any("verifier unavailable" in n for n in verdict.evidence.notes)
        assert verdict.evidence.weights["verifier"] == 0.0


_answers = st.lists(st.sampled_from(["a", "b", "c", None]), max_size=12)
_errors = st.none() | st.builds(Classification, st.sampled_from(list(ErrorClass)), st.text(max_size=20))


class TestDecideProperties:
    @given(
        answers=_answers,
        error=_errors,
        retries=st.integers(0, 5),
        refines=st.integers(0, 5),
        alternatives=st.lists(st.sampled_from(["x", "y"]), max_size=2),
        open_keys=st.sets(st.sampled_from(["x", "y", "t"])),
    )
    def test_always_one_explained_verdict_and_deterministic(
        self, answers, error, retries, refines, alternatives, open_keys
    ):
        obs = Observation(
            target="t",
            tally=Tally.of(answers),
            error=error,
            retries=retries,
            refines=refines,
            alternatives=tuple(alternatives),
            breakers=dict.fromkeys(open_keys, "open"),
        )
        verdict = decide(obs)
        assert verdict == decide(obs)
        assert verdict.reason
        if verdict.action is Action.SWITCH:
            assert verdict.switch_to in alternatives and verdict.switch_to not in open_keys
        if verdict.action is Action.RETRY:
            assert retries < 3 and "t" not in open_keys
        if verdict.action is Action.REFINE:
            assert verdict.feedback


class TestPolicy:
    def test_min_above_max_names_both_fields(self):
        with pytest.raises(pydantic.ValidationError, match="min_samples=9 is greater than max_samples=8"):
            Policy(min_samples=9, max_samples=8)

    def test_unknown_stopping_rule_names_the_known_ones(self):
        with pytest.raises(pydantic.ValidationError, match="stopping") as info:
            Policy(stopping="best-guess")
        assert "ac-beta" in str(info.value)

    @pytest.mark.parametrize(
        ("field", "value"),
        [("accept_threshold", 1.5), ("max_retries", -1), ("min_samples", 0), ("max_switches", -2)],
    )
    def test_bad_values_name_the_field(self, field, value):
        with pytest.raises(pydantic.ValidationError, match=field):
            Policy(**{field: value})

    def test_negative_weight_is_rejected(self):
        with pytest.raises(pydantic.ValidationError, match="verifier"):
            Policy(weights={"agreement": 1.0, "verifier": -0.1})

    def test_unknown_field_is_rejected(self):
        with pytest.raises(pydantic.ValidationError, match="acept_threshold"):
            Policy(acept_threshold=0.5)  # type: ignore[call-arg]

    def test_stopping_rule_is_built_from_name(self):
        rule = Policy(stopping="sc-3").stopping_rule()
        assert rule(Tally.of(["a", "a", "a"])).stop
        assert not rule(Tally.of(["a", "a"])).stop


class TestDecideWithTheDefaultRule:
    def test_three_different_answers_at_the_cap_are_not_accepted(self):
        policy = Policy(max_samples=3)
        tally = Tally.of(["1", "2", "3"], max_samples=3)
        verdict = decide(Observation(tally=tally, stop=policy.stopping_rule()(tally)), policy)
        assert verdict.action is not Action.ACCEPT
        assert verdict.confidence == pytest.approx(0.5)

    def test_three_agreeing_answers_at_the_cap_are_accepted(self):
        policy = Policy(max_samples=3)
        tally = Tally.of(["7", "7", "7"], max_samples=3)
        verdict = decide(Observation(tally=tally, stop=policy.stopping_rule()(tally)), policy)
        assert verdict.action is Action.ACCEPT


class TestDecideReasons:
    def test_a_near_miss_never_prints_as_equal_to_the_threshold(self):
        obs = Observation(tally=Tally.of(["a"]), stop=StopDecision(True, 0.7986, "x", "default"))
        verdict = decide(obs, Policy(weights={"agreement": 1.0}, low_confidence=("stop",)))
        assert "confidence 0.799 < threshold 0.800" in verdict.reason

    def test_a_clear_margin_keeps_two_decimals(self):
        verdict = decide(_agreeing())
        assert "confidence 0.97 >= threshold 0.80" in verdict.reason


class TestVerdictFields:
    @pytest.mark.parametrize(
        ("field", "value"),
        [
            ("confidence", math.nan),
            ("confidence", 1.5),
            ("confidence", -0.1),
            ("retry_after_s", -1.0),
            ("retry_after_s", math.inf),
        ],
    )
    def test_out_of_range_values_are_refused_naming_the_field(self, field: str, value: float) -> None:
        with pytest.raises(pydantic.ValidationError, match=field):
            Verdict.model_validate({"action": "accept", "reason": "r", field: value})

    def test_the_bounds_themselves_are_accepted(self) -> None:
        assert Verdict(action=Action.ACCEPT, reason="r", confidence=1.0).confidence == 1.0
        assert Verdict(action=Action.STOP, reason="r", confidence=0.0, retry_after_s=0.0).retry_after_s == 0.0
