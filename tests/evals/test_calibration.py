"""A calibration: monotone, bounded, applied per member, round-tripped through its file, and what
``decide`` does with it."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from retryctl.controller import (
    CALIBRATED,
    FUSED,
    Calibration,
    CalibrationCurve,
    Observation,
    Policy,
    Tally,
    decide,
)
from retryctl.evals import (
    Outcome,
    ece,
    fit_calibration,
    fit_curve,
    load_calibration,
    save_calibration,
    split_of,
)
from retryctl.exceptions import ConfigError


class TestCurve:
    def test_linear_between_knots_and_flat_beyond(self) -> None:
        curve = CalibrationCurve(raw=(0.2, 0.6), calibrated=(0.1, 0.5))
        assert (curve(0.0), curve(1.0)) == (0.1, 0.5)
        assert curve(0.4) == pytest.approx(0.3)

    @pytest.mark.parametrize(
        ("raw", "calibrated", "problem"),
        [
            ((0.5, 0.4), (0.1, 0.2), "strictly increasing"),
            ((0.1, 0.2), (0.5, 0.4), "non-decreasing"),
            ((0.1, 1.2), (0.1, 0.2), "outside [0, 1]"),
            ((0.1,), (0.1, 0.2), "knots"),
        ],
    )
    def test_a_curve_that_is_not_a_monotone_map_is_refused(
        self, raw: tuple[float, ...], calibrated: tuple[float, ...], problem: str
    ) -> None:
        with pytest.raises(ValidationError, match=problem.replace("[", r"\[").replace("]", r"\]")):
            CalibrationCurve(raw=raw, calibrated=calibrated)

    def test_a_calibration_needs_a_curve_for_every_member(self) -> None:
        with pytest.raises(ValidationError, match="'\\*' curve"):
            Calibration(curves={"calculator": CalibrationCurve(raw=(0.5,), calibrated=(0.5,))})


class TestFit:
    @given(st.lists(st.tuples(st.floats(0, 1), st.booleans()), min_size=1, max_size=60))
    def test_the_fit_is_monotone_and_bounded(self, points: list[tuple[float, bool]]) -> None:
        curve = fit_curve([c for c, _ in points], [ok for _, ok in points])
        grid = [i / 50 for i in range(51)]
        mapped = [curve(x) for x in grid]
        assert all(0.0 < y < 1.0 for y in mapped)  # shrunk: never a promise of exactly 0 or 1
        assert all(a <= b for a, b in itertools.pairwise(mapped))

    def test_an_overconfident_signal_is_pulled_down_to_its_share_right(self) -> None:
        # Raw 0.9 is right 3 times in 10; raw 0.2 never: the map says so (shrunk towards 1/2).
        raw = [0.9] * 10 + [0.2] * 10
        correct = [True] * 3 + [False] * 7 + [False] * 10
        curve = fit_curve(raw, correct)
        assert curve(0.9) == pytest.approx(4 / 12)
        assert curve(0.2) == pytest.approx(1 / 12)
        before = ece(list(zip(raw, correct, strict=True)))
        after = ece([(curve(x), ok) for x, ok in zip(raw, correct, strict=True)])
        assert before is not None and after is not None and after < before

    def test_a_member_with_enough_outcomes_gets_its_own_curve(self) -> None:
        outcomes = [Outcome(0.9, i % 2 == 0, "calculator") for i in range(40)]
        outcomes += [Outcome(0.9, True, "python") for _ in range(5)]
        calibration = fit_calibration(outcomes)
        assert set(calibration.curves) == {"*", "calculator"}
        assert calibration(0.9, "calculator") == pytest.approx(21 / 42)
        assert calibration(0.9, "python") == calibration(0.9, "*")  # too few of its own

    def test_the_split_is_stable_and_near_its_share(self) -> None:
        held = [split_of(f"t{i}", 0.3) for i in range(2000)]
        assert held == [split_of(f"t{i}", 0.3) for i in range(2000)]
        assert 0.25 < sum(held) / len(held) < 0.35


class TestFile:
    def test_round_trip(self, tmp_path: Path) -> None:
        calibration = fit_calibration([Outcome(x / 10, x > 5, "calculator") for x in range(11)], source="t")
        path = tmp_path / "calibration.json"
        save_calibration(calibration, path)
        assert load_calibration(path) == calibration
        assert [p.name for p in tmp_path.iterdir()] == ["calibration.json"]  # no temporary left

    def test_a_bad_file_names_itself_and_the_field(self, tmp_path: Path) -> None:
        path = tmp_path / "c.json"
        path.write_text(json.dumps({"curves": {"*": {"raw": [0.5, 0.4], "calibrated": [0.1, 0.2]}}}))
        with pytest.raises(ConfigError, match=r"c\.json.*curves\.\*"):
            load_calibration(path)
        with pytest.raises(ConfigError, match="cannot be read"):
            load_calibration(tmp_path / "missing.json")


class TestDecide:
    def test_the_threshold_is_on_the_calibrated_confidence_and_both_are_evidence(self) -> None:
        flat = Calibration(curves={"*": CalibrationCurve(raw=(0.0, 1.0), calibrated=(0.05, 0.4))})
        tally = Tally.of(["51"] * 5)
        obs = Observation(target="calculator", tally=tally)
        raw = decide(obs, Policy(accept_threshold=0.8))
        assert raw.action == "accept"
        calibrated = decide(obs, Policy(accept_threshold=0.8, calibration=flat, low_confidence=("stop",)))
        assert calibrated.action == "stop"
        assert calibrated.confidence == pytest.approx(flat(raw.confidence or 0.0))
        signals = calibrated.evidence.signals
        assert signals[FUSED] == raw.confidence and signals[CALIBRATED] == calibrated.confidence
        assert calibrated.reason.startswith("calibrated confidence 0.40 (fused 1.00) < threshold 0.80")
