"""PredictiveCut, the default: the predictive rule over plain votes, with samples cut short."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from retryctl.controller.stopping import (
    ConfidenceWeighted,
    PredictiveCut,
    PredictiveMajority,
    Tally,
    default_stopping_rule,
)
from retryctl.exceptions import ConfigError

answers = st.lists(st.sampled_from(["a", "b", "c", None]), min_size=0, max_size=30)
confidence = st.one_of(st.none(), st.floats(0.01, 1.0))


class TestVotes:
    @settings(max_examples=300, deadline=None)
    @given(data=st.data(), drawn=answers, cap=st.integers(min_value=1, max_value=40))
    def test_it_decides_as_the_predictive_rule_whatever_the_confidences(
        self, data: st.DataObject, drawn: list[str | None], cap: int
    ) -> None:
        known = data.draw(st.lists(confidence, min_size=len(drawn), max_size=len(drawn)))
        tally = Tally.of(drawn, known, max_samples=max(cap, len(drawn)))
        default = PredictiveCut()(tally)
        counted = PredictiveMajority()(Tally.of(drawn, max_samples=tally.max_samples))
        assert (default.stop, default.confidence, default.reason, default.max_samples) == (
            counted.stop,
            counted.confidence,
            counted.reason,
            counted.max_samples,
        )
        assert default.rule == "default" and default.leader is None

    def test_a_confident_minority_does_not_outvote_the_majority(self) -> None:
        # The weighted rule follows the one sure "b"; the default counts votes, as predictive does.
        tally = Tally.of(["a", "a", "b"], [0.2, 0.2, 0.9], max_samples=40)
        assert ConfidenceWeighted()(tally).leader == "b"
        assert PredictiveCut()(tally).leader is None and tally.leader == "a"

    def test_it_is_the_default(self) -> None:
        assert default_stopping_rule() == PredictiveCut(threshold=0.975, prior=0.5, warmup=2)
        assert default_stopping_rule().name == "default"


class TestCutBound:
    def test_the_lowest_floor_of_the_first_warmup_samples(self) -> None:
        rule = PredictiveCut()
        assert rule.cut_bound([]) is None
        assert rule.cut_bound([0.8]) is None
        assert rule.cut_bound([0.8, 0.6]) == 0.6
        # Later samples do not move it: the bound is set by the first ones only.
        assert rule.cut_bound([0.8, 0.6, 0.1]) == 0.6
        assert PredictiveCut(warmup=3).cut_bound([0.8, 0.6, 0.7]) == 0.6

    def test_a_sample_without_logprobs_sets_no_bound_and_cut_false_none(self) -> None:
        assert PredictiveCut().cut_bound([0.8, None]) is None
        assert PredictiveCut(cut=False).cut_bound([0.8, 0.6]) is None
        assert ConfidenceWeighted().cut_bound([0.8, 0.6]) == PredictiveCut().cut_bound([0.8, 0.6])

    @pytest.mark.parametrize(
        ("field", "kwargs"),
        [("threshold", {"threshold": 1.5}), ("prior", {"prior": 0.0}), ("warmup", {"warmup": 0})],
    )
    def test_parameters_are_checked_by_name(self, field: str, kwargs: dict[str, float]) -> None:
        with pytest.raises(ConfigError) as info:
            PredictiveCut(**kwargs)  # type: ignore[arg-type]
        assert info.value.field == field


def test_confidence_reported_is_the_predictive_rules() -> None:
    tally = Tally.of(["a", "b", "c"], [0.5, 0.5, 0.5], max_samples=3)
    assert PredictiveCut()(tally).confidence == pytest.approx(PredictiveMajority()(tally).confidence)
    assert not math.isnan(PredictiveCut()(tally).confidence)
