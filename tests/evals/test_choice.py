"""What ``--calibration`` means: shipped, none, a file, and uncalibrated on another model."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from retryctl.agent._calibration import shipped_calibration
from retryctl.evals import Outcome, fit_calibration, save_calibration
from retryctl.evals._choice import choose_calibration
from retryctl.exceptions import ConfigError


class TestChooseCalibration:
    def test_the_embedded_model_defaults_to_the_shipped_one(self) -> None:
        choice = choose_calibration(None, embedded=True)
        assert choice.calibration == shipped_calibration() and choice.label == "shipped"
        assert choice.describe().startswith("calibration: shipped (")

    def test_another_model_without_one_is_uncalibrated_and_says_so(self) -> None:
        choice = choose_calibration(None, embedded=False)
        assert choice.calibration is None and choice.label == "uncalibrated"
        assert "not probabilities" in choice.describe() and "retryctl calibrate" in choice.describe()
        assert choose_calibration("none", embedded=True).calibration is None

    def test_the_shipped_one_is_refused_for_another_model(self) -> None:
        with pytest.raises(ConfigError, match=r"--calibration='shipped'.*embedded model's"):
            choose_calibration("shipped", embedded=False)

    def test_a_file_is_read_and_a_bad_one_named_with_the_option(self, tmp_path: Path) -> None:
        good = tmp_path / "c.json"
        save_calibration(fit_calibration([Outcome(x / 10, x > 4) for x in range(11)], source="t"), good)
        choice = choose_calibration(str(good), embedded=False)
        assert choice.label == str(good) and choice.calibration is not None
        assert choice.describe() == f"calibration: {good} (t)"
        bad = tmp_path / "bad.json"
        bad.write_text(json.dumps({"curves": {}}))
        with pytest.raises(ConfigError, match=r"--serve-option=.*bad\.json.*curves") as caught:
            choose_calibration(str(bad), embedded=True, option="--serve-option")
        assert caught.value.field == "--serve-option"
