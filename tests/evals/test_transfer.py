"""Calibration across difficulty: the stratum weights, the splits, and ECE under shift, on hand-built
decision points whose figures can be worked out by hand."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from retryctl.controller import Calibration, CalibrationCurve
from retryctl.evals import Outcome, balanced_weights, by_stratum, fit_calibration, transfer
from retryctl.evals._transfer import Shift, ordered_strata, shifts


def _points(stratum: str, tasks: int, *, raw: float, correct: bool, per_task: int = 1) -> list[Outcome]:
    return [
        Outcome(raw, correct, task=f"{stratum}-{t}", stratum=stratum)
        for t in range(tasks)
        for _ in range(per_task)
    ]


class TestBalancedWeights:
    def test_strata_weigh_alike_and_tasks_alike_within_them(self) -> None:
        # Stratum a: one task of four points; b: two tasks of one point. Raw weights 1/8 and 1/4,
        # scaled to a mean of 1: 0.75 and 1.5, so each stratum sums to 3.
        outcomes = _points("a", 1, raw=0.5, correct=True, per_task=4) + _points(
            "b", 2, raw=0.5, correct=False
        )
        assert balanced_weights(outcomes) == pytest.approx([0.75] * 4 + [1.5] * 2)

    def test_the_hard_stratum_no_longer_outvotes_the_easy_one(self) -> None:
        # Ten hard tasks wrong at raw 0.9, two easy ones right at 0.9. Pooled: (2 + 1) / (12 + 2);
        # balanced, each stratum weighs 6: (6 + 1) / (12 + 2).
        outcomes = _points("three_step", 10, raw=0.9, correct=False) + _points(
            "small", 2, raw=0.9, correct=True
        )
        pooled = fit_calibration(outcomes, balance_strata=False)
        balanced = fit_calibration(outcomes)
        assert pooled(0.9) == pytest.approx(3 / 14)
        assert balanced(0.9) == pytest.approx(7 / 14)
        assert "strata weighted equally" in balanced.method and "strata" not in pooled.method

    def test_without_strata_it_is_one_weight_per_task(self) -> None:
        outcomes = [
            Outcome(0.5, True, task="t1"),
            Outcome(0.5, True, task="t1"),
            Outcome(0.5, False, task="t2"),
        ]
        assert balanced_weights(outcomes) == pytest.approx([0.75, 0.75, 1.5])


class TestShifts:
    def test_leave_one_out_then_hard_to_easy_and_back(self) -> None:
        strata = ["small", "one_step", "two_step", "three_step"]
        got = shifts(strata)
        assert [s.name for s in got] == [
            "leave out small",
            "leave out one_step",
            "leave out two_step",
            "leave out three_step",
            "hard -> easy",
            "easy -> hard",
        ]
        assert got[4] == Shift("hard -> easy", ("two_step", "three_step"), ("small", "one_step"))
        assert got[0].fit_on == ("one_step", "two_step", "three_step")

    def test_a_split_repeating_a_leave_one_out_is_not_repeated(self) -> None:
        assert [s.name for s in shifts(["a", "b"])] == ["leave out a", "leave out b"]
        assert [s.name for s in shifts(["a", "b", "c"])][-1] == "easy -> hard"
        assert len(shifts(["a", "b", "c"])) == 4
        assert shifts(["a"]) == []

    def test_strata_are_ordered_easiest_first_then_by_name(self) -> None:
        outcomes = [Outcome(0.5, True, stratum=s) for s in ("zeta", "three_step", "small", "", "alpha")]
        assert ordered_strata(outcomes) == ["small", "three_step", "alpha", "zeta"]


class TestTransfer:
    def test_a_map_fitted_where_the_model_is_weak_fails_where_it_is_strong(self) -> None:
        # small: 20 tasks right at raw 0.5; three_step: 20 wrong at raw 0.5. Fitted on three_step the
        # map says (0 + 1) / (20 + 2) everywhere, so on small its ECE is 1 - 1/22; the raw one is 0.5.
        outcomes = _points("small", 20, raw=0.5, correct=True) + _points(
            "three_step", 20, raw=0.5, correct=False
        )
        rows = {r["name"]: r for r in transfer(outcomes)}
        assert set(rows) == {"leave out small", "leave out three_step"}
        out = rows["leave out small"]
        assert (out["fit_on"], out["test_on"], out["fitted_on"], out["tested_on"]) == (
            ["three_step"],
            ["small"],
            20,
            20,
        )
        assert out["ece_raw"] == pytest.approx(0.5)
        assert out["ece_calibrated"] == pytest.approx(21 / 22)
        assert out["ece_pooled_fit"] == pytest.approx(21 / 22)  # one stratum fitted: the same map
        assert out["by_stratum"]["small"]["tasks"] == 20 and "all" in out["by_stratum"]

    def test_the_fit_is_passed_in_and_given_the_weighting(self) -> None:
        seen: list[tuple[int, bool]] = []
        flat = Calibration(curves={"*": CalibrationCurve(raw=(0.0,), calibrated=(0.5,))})

        def fit(train: Sequence[Outcome], balance: bool) -> Calibration:
            seen.append((len(train), balance))
            return flat

        outcomes = _points("small", 3, raw=0.9, correct=True) + _points("one_step", 2, raw=0.9, correct=True)
        rows = transfer(outcomes, fit=fit)
        assert seen == [(2, True), (2, False), (3, True), (3, False)]
        assert all(r["ece_calibrated"] == pytest.approx(0.5) for r in rows)


class TestByStratum:
    def test_raw_and_calibrated_per_stratum_and_over_all(self) -> None:
        shift_down = Calibration(curves={"*": CalibrationCurve(raw=(0.0, 1.0), calibrated=(0.0, 0.5))})
        points = _points("small", 10, raw=1.0, correct=True) + _points("two_step", 10, raw=1.0, correct=False)
        figures = by_stratum(points, shift_down)
        assert list(figures) == ["small", "two_step", "all"]
        assert figures["small"]["ece_raw"] == pytest.approx(0.0)
        assert figures["small"]["ece_calibrated"] == pytest.approx(0.5)
        assert figures["two_step"]["ece_raw"] == pytest.approx(1.0)
        assert figures["all"]["points"] == 20
        assert by_stratum([], shift_down) == {}
