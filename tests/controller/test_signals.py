import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from retryctl.controller._signals import (
    Signal,
    ValidatorResult,
    agreement,
    fuse,
    token_confidence,
    validators_signal,
    weakest_span,
)


class TestSignal:
    @pytest.mark.parametrize("value", [-0.01, 1.01, float("nan")])
    def test_value_outside_unit_interval_is_rejected_with_name(self, value):
        with pytest.raises(ValueError, match="'x'"):
            Signal("x", value)


class TestTokenConfidence:
    def test_geometric_mean_probability(self):
        logprobs = [math.log(0.9), math.log(0.4), math.log(0.5)]
        expected = (0.9 * 0.4 * 0.5) ** (1 / 3)
        assert token_confidence(logprobs).value == pytest.approx(expected)

    def test_missing_logprobs_is_unavailable(self):
        signal = token_confidence(None)
        assert not signal.available
        assert "logprobs" in signal.note

    @given(st.lists(st.floats(min_value=-50, max_value=0), min_size=1, max_size=50))
    def test_always_in_unit_interval(self, logprobs):
        assert 0.0 <= token_confidence(logprobs).value <= 1.0


class TestWeakestSpan:
    def test_finds_the_one_guessed_span(self):
        sure, guess = math.log(0.99), math.log(0.1)
        logprobs = [sure] * 20 + [guess] * 2 + [sure] * 20
        overall = token_confidence(logprobs).value
        weakest = weakest_span(logprobs, window=2).value
        assert weakest == pytest.approx(0.1)
        assert overall > 0.8 > weakest

    @given(
        st.lists(st.floats(min_value=-20, max_value=0), min_size=1, max_size=40),
        st.integers(min_value=1, max_value=10),
    )
    def test_matches_brute_force(self, logprobs, window):
        if len(logprobs) <= window:
            expected = math.exp(sum(logprobs) / len(logprobs))
        else:
            expected = min(
                math.exp(sum(logprobs[i : i + window]) / window) for i in range(len(logprobs) - window + 1)
            )
        assert weakest_span(logprobs, window).value == pytest.approx(expected, rel=1e-9, abs=1e-12)

    def test_window_must_be_positive(self):
        with pytest.raises(ValueError, match="window"):
            weakest_span([0.0], window=0)


class TestAgreement:
    def test_share_of_leader_counting_unanswered_against(self):
        assert agreement(["a", "a", "b", None]).value == pytest.approx(0.5)

    def test_no_answers_at_all_is_zero(self):
        assert agreement([None, None]).value == 0.0

    def test_no_candidates_is_unavailable(self):
        assert not agreement([]).available


class TestValidators:
    def test_share_passed_and_failures_named(self):
        signal = validators_signal(
            [ValidatorResult("is_int", True), ValidatorResult("positive", False, "got -3")]
        )
        assert signal.value == 0.5
        assert "positive" in signal.note


class TestFuse:
    def test_weighted_mean_keeps_components(self):
        fusion = fuse(
            [Signal("agreement", 1.0), Signal("verifier", 0.5)], {"agreement": 0.5, "verifier": 0.5}
        )
        assert fusion.confidence == pytest.approx(0.75)
        assert fusion.signals == {"agreement": 1.0, "verifier": 0.5}

    def test_unavailable_signal_renormalises_and_is_explained(self):
        fusion = fuse(
            [Signal("agreement", 0.6), Signal.unavailable("verifier", "verifier timed out after 1s")],
            {"agreement": 0.5, "verifier": 0.5},
        )
        assert fusion.confidence == pytest.approx(0.6)
        assert fusion.weights["verifier"] == 0.0
        assert any("verifier unavailable" in note for note in fusion.notes)

    def test_nothing_weighted_is_zero_confidence(self):
        fusion = fuse([Signal("other", 1.0)], {"agreement": 1.0})
        assert fusion.confidence == 0.0

    @given(
        st.dictionaries(
            st.sampled_from(["agreement", "verifier", "token_confidence"]),
            st.floats(min_value=0, max_value=1),
            min_size=1,
        )
    )
    def test_confidence_within_component_range(self, values):
        fusion = fuse([Signal(k, v) for k, v in values.items()])
        assert min(values.values()) - 1e-9 <= fusion.confidence <= max(values.values()) + 1e-9
