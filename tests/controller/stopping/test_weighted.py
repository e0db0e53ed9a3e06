"""ConfidenceWeighted: the predictive rule over confidence-weighted votes, and its cut bound."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from retryctl._cut import CutWatch
from retryctl.controller.stopping import (
    GROUP_WINDOW,
    ConfidenceWeighted,
    PredictiveMajority,
    Tally,
    cut_point,
    group_floor,
)
from retryctl.exceptions import ConfigError

answers = st.lists(st.sampled_from(["a", "b", "c", None]), min_size=0, max_size=30)


class TestWithoutConfidences:
    @settings(max_examples=300, deadline=None)
    @given(drawn=answers, cap=st.integers(min_value=1, max_value=40))
    def test_it_is_the_predictive_rule(self, drawn: list[str | None], cap: int) -> None:
        tally = Tally.of(drawn, max_samples=max(cap, len(drawn)))
        weighted, counted = ConfidenceWeighted()(tally), PredictiveMajority()(tally)
        assert (weighted.stop, weighted.confidence, weighted.reason) == (
            counted.stop,
            counted.confidence,
            counted.reason,
        )
        assert weighted.rule == "weighted" and counted.rule == "predictive"
        assert weighted.leader is None

    @settings(max_examples=200, deadline=None)
    @given(drawn=answers, cap=st.integers(min_value=1, max_value=40), level=st.floats(0.05, 1.0))
    def test_equal_confidences_are_plain_votes(self, drawn: list[str | None], cap: int, level: float) -> None:
        tally = Tally.of(drawn, [level] * len(drawn), max_samples=max(cap, len(drawn)))
        weighted, counted = (
            ConfidenceWeighted()(tally),
            PredictiveMajority()(Tally.of(drawn, max_samples=tally.max_samples)),
        )
        assert weighted.stop == counted.stop
        assert weighted.confidence == pytest.approx(counted.confidence, abs=1e-9)


class TestWeightedVotes:
    def test_a_confident_answer_outweighs_more_doubtful_votes(self) -> None:
        tally = Tally.of(["a", "a", "b"], [0.2, 0.2, 0.9], max_samples=40)
        decision = ConfidenceWeighted()(tally)
        # mean 13/30: a weighs 2 * 0.2 / (13/30) = 0.92, b 0.9 / (13/30) = 2.08
        assert decision.leader == "b" and not decision.stop
        assert decision.details["leader_weight"] == pytest.approx(0.9 / (1.3 / 3))
        assert "'b' has 1 of 3 votes, weight 2.08 by token confidence" in decision.reason

    def test_the_weights_sum_to_the_votes(self) -> None:
        tally = Tally.of(["a", "b", None, "a"], [0.9, 0.3, 0.5, 0.7], max_samples=40)
        decision = ConfidenceWeighted()(tally)
        assert decision.details["mean_confidence"] == pytest.approx(0.6)
        assert decision.leader == "a" and decision.details["leader_weight"] == pytest.approx(1.6 / 0.6)

    def test_agreeing_confident_samples_stop_where_the_predictive_rule_does(self) -> None:
        rule = ConfidenceWeighted()
        assert not rule(Tally.of(["a"] * 2, [0.99] * 2, max_samples=8)).stop
        assert rule(Tally.of(["a"] * 3, [0.99] * 3, max_samples=8)).stop

    def test_at_the_cap_it_stops_with_the_modal_posterior_as_confidence(self) -> None:
        decision = ConfidenceWeighted()(Tally.of(["a", "b", "c"], [0.5, 0.5, 0.5], max_samples=3))
        assert decision.stop and decision.confidence == pytest.approx(0.5)

    def test_parameters_are_checked_by_name(self) -> None:
        with pytest.raises(ConfigError, match="warmup"):
            ConfidenceWeighted(warmup=0)
        with pytest.raises(ConfigError, match="threshold"):
            ConfidenceWeighted(threshold=1.5)


class TestCutBound:
    def test_none_until_warmup_samples_are_complete(self) -> None:
        rule = ConfidenceWeighted()
        assert rule.cut_bound([]) is None and rule.cut_bound([0.4]) is None
        assert rule.cut_bound([0.4, 0.6]) == 0.4
        # Set by the first samples only: later floors never move it, so a batch cuts as one by one would.
        assert rule.cut_bound([0.4, 0.6, 0.1, 0.9]) == 0.4
        assert ConfidenceWeighted(warmup=3).cut_bound([0.4, 0.6]) is None
        assert ConfidenceWeighted(cut=False).cut_bound([0.4, 0.6]) is None

    def test_a_sample_without_logprobs_sets_no_bound(self) -> None:
        assert ConfidenceWeighted().cut_bound([None, 0.5]) is None


class TestCutPoint:
    def test_the_decoder_checks_the_rules_window(self) -> None:
        from retryctl.models._types import CUT_WINDOW

        assert CUT_WINDOW == GROUP_WINDOW

    def test_cuts_at_the_first_window_below_the_bound(self) -> None:
        logprobs = [math.log(0.9)] * 20 + [math.log(0.1)] * 20
        at = cut_point(logprobs, 0.5)
        assert at is not None and at > GROUP_WINDOW
        before = logprobs[at - 1 - GROUP_WINDOW : at - 1]
        window = logprobs[at - GROUP_WINDOW : at]
        assert sum(before) / GROUP_WINDOW >= math.log(0.5) > sum(window) / GROUP_WINDOW

    def test_a_sample_shorter_than_the_window_or_above_the_bound_is_not_cut(self) -> None:
        assert cut_point([math.log(0.01)] * (GROUP_WINDOW - 1), 0.5) is None
        assert cut_point([math.log(0.6)] * 40, 0.5) is None
        assert cut_point([math.log(0.4)] * 40, 0.5) == GROUP_WINDOW

    def test_the_floor_is_the_weakest_window(self) -> None:
        logprobs = [math.log(0.9)] * 20 + [math.log(0.2)] * GROUP_WINDOW + [math.log(0.9)] * 5
        assert group_floor(logprobs) == pytest.approx(0.2)
        # Cut exactly when the bound is above the floor.
        assert cut_point(logprobs, 0.21) is not None and cut_point(logprobs, 0.19) is None

    @settings(max_examples=200, deadline=None)
    @given(
        logprobs=st.lists(st.floats(min_value=-8.0, max_value=0.0), max_size=60),
        bound=st.floats(min_value=0.01, max_value=0.99),
    )
    def test_a_replay_cuts_where_the_decoder_does(self, logprobs: list[float], bound: float) -> None:
        watch = CutWatch(bound, GROUP_WINDOW)
        live = next((i + 1 for i, lp in enumerate(logprobs) if watch.add(lp)), None)
        assert cut_point(logprobs, bound) == live
        if live is not None:
            assert group_floor(logprobs[:live]) < bound or math.isclose(group_floor(logprobs[:live]), bound)
