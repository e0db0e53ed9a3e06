"""The graded figures, checked against values worked out by hand."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from retryctl.evals import Graded, auroc, brier, ece, reliability, risk_coverage, scores


class TestCalibrationError:
    def test_equal_mass_bins_weigh_each_gap_by_its_size(self) -> None:
        # Two bins of two: mean confidences 0.15 and 0.85, shares right 0 and 1.
        points = [(0.1, False), (0.2, False), (0.8, True), (0.9, True)]
        assert ece(points, bins=2, min_per_bin=2) == pytest.approx(0.15)
        (low, low_right, low_n), (high, high_right, high_n) = reliability(points, bins=2, min_per_bin=2)
        assert (low, high) == pytest.approx((0.15, 0.85))
        assert (low_right, low_n, high_right, high_n) == (0.0, 2, 1.0, 2)

    def test_too_few_points_for_a_bin_each_share_one(self) -> None:
        # Four points, ten a bin: one bin, mean confidence 0.5 and half right. One-point bins say 0.15,
        # the mean |confidence - outcome|, of the same points.
        points = [(0.1, False), (0.2, False), (0.8, True), (0.9, True)]
        assert ece(points) == pytest.approx(0.0)
        assert ece(points, min_per_bin=1) == pytest.approx(0.15)

    def test_a_confident_wrong_answer_is_the_whole_error(self) -> None:
        assert ece([(1.0, False)]) == 1.0
        assert ece([]) is None

    def test_brier_is_the_mean_squared_gap(self) -> None:
        assert brier([(0.9, True), (0.6, False)]) == pytest.approx((0.01 + 0.36) / 2)


class TestRanking:
    def test_auroc_counts_ties_half(self) -> None:
        assert auroc([(0.9, True), (0.1, False)]) == 1.0
        assert auroc([(0.1, True), (0.9, False)]) == 0.0
        assert auroc([(0.5, True), (0.5, False)]) == 0.5
        assert auroc([(0.9, True)]) is None  # undefined without a wrong answer

    @given(st.lists(st.tuples(st.floats(0, 1), st.booleans()), min_size=1, max_size=30))
    def test_auroc_matches_the_pairwise_definition(self, points: list[tuple[float, bool]]) -> None:
        right = [c for c, ok in points if ok]
        wrong = [c for c, ok in points if not ok]
        got = auroc(points)
        if not right or not wrong:
            assert got is None
            return
        pairs = sum((r > w) + 0.5 * (r == w) for r in right for w in wrong)
        assert got == pytest.approx(pairs / (len(right) * len(wrong)))

    def test_risk_coverage_answers_the_most_confident_first(self) -> None:
        points = [(0.9, True), (0.8, False), (0.8, True), (0.1, False)]
        assert risk_coverage(points) == [(0.25, 0.0), (0.75, pytest.approx(1 / 3)), (1.0, 0.5)]


class TestScores:
    def test_abstentions_lower_accuracy_and_coverage_not_precision(self) -> None:
        graded = [
            Graded(0.9, True),
            Graded(0.85, True),
            Graded(0.8, False),
            Graded(0.3, True, accepted=False),
            Graded(0.2, False, accepted=False),
        ]
        s = scores(graded)
        assert (s.n, s.accuracy, s.coverage) == (5, 0.4, 0.6)
        assert s.accepted_precision == pytest.approx(2 / 3)
        assert s.summary()["auroc"] == s.auroc

    def test_nothing_accepted_has_no_precision(self) -> None:
        s = scores([Graded(0.2, True, accepted=False)])
        assert (s.accuracy, s.coverage, s.accepted_precision, s.ece) == (0.0, 0.0, None, None)
