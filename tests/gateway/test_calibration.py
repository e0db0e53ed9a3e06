"""``retryctl serve --calibration``: the gateway's adaptive requests decide under the calibration its
config names, and the response, headers and decision records say which."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from pydantic import ValidationError

from retryctl.audit import DecisionLog, read_records, verify_log
from retryctl.controller import Calibration, CalibrationCurve
from retryctl.gateway import EmbeddedUpstream, Gateway, GatewayConfig
from retryctl.models import ScriptedBackend
from tests.gateway._support import adaptive, call, config


def _flat(tmp_path: Path, value: float) -> Path:
    path = tmp_path / "flat.json"
    curve = CalibrationCurve(raw=(0.0,), calibrated=(value,))
    path.write_text(Calibration(curves={"*": curve}, source="flat").model_dump_json())
    return path


def _gateway(log: DecisionLog | None = None, **kwargs: object) -> Gateway:
    backend = ScriptedBackend(["The answer is 42."], confidence=0.95, cycle=True)
    return Gateway(config(**kwargs), upstream=EmbeddedUpstream(backend, name="scripted"), log=log)


class TestAdaptiveUnderACalibration:
    def test_the_file_decides_and_every_record_and_the_response_name_it(self, tmp_path: Path) -> None:
        low = _flat(tmp_path, 0.05)
        with DecisionLog(tmp_path / "d.jsonl") as log:
            response = call(
                _gateway(log, calibration=str(low)), "POST", "/v1/chat/completions", adaptive(min_samples=3)
            )
        assert response.status_code == 200
        block = response.json()["retryctl"]
        # Three agreeing samples would be accepted raw; calibrated they are P(correct) 0.05.
        assert (block["verdict"], block["confidence"], block["calibration"]) == ("stop", 0.05, str(low))
        assert response.headers["x-retryctl-calibration"] == str(low)
        assert verify_log(tmp_path / "d.jsonl").ok
        records = [r for r in read_records(tmp_path / "d.jsonl") if r.kind in ("verdict", "summary")]
        assert records and all(r.extra.get("calibration") == str(low) for r in records)
        (verdict,) = [r for r in records if r.kind == "verdict"]
        assert verdict.signals["fused"] > 0.8 and verdict.signals["calibrated"] == 0.05

    def test_none_is_the_raw_confidence_and_says_so(self) -> None:
        response = call(_gateway(calibration="none"), "POST", "/v1/chat/completions", adaptive(min_samples=3))
        block = response.json()["retryctl"]
        assert (block["verdict"], block["calibration"]) == ("accept", "none")


class TestConfig:
    def test_an_upstream_without_a_file_is_uncalibrated(self) -> None:
        settings = GatewayConfig(upstream="http://127.0.0.1:1/v1", upstream_model="m")
        choice = settings.calibration_choice()
        assert choice.calibration is None and choice.label == "uncalibrated"

    def test_the_embedded_model_defaults_to_the_shipped_one(self) -> None:
        assert GatewayConfig(embedded=True).calibration_choice().label == "shipped"

    def test_the_shipped_one_is_refused_for_an_upstream(self) -> None:
        with pytest.raises(ValidationError, match="embedded model's") as caught:
            GatewayConfig(upstream="http://127.0.0.1:1/v1", upstream_model="m", calibration="shipped")
        assert caught.value.errors()[0]["loc"] == ("calibration",)

    def test_a_bad_file_is_named(self, tmp_path: Path) -> None:
        bad = tmp_path / "cal.json"
        bad.write_text(json.dumps({"curves": {}}))
        with pytest.raises(ValidationError, match=r"cal\.json: .*'\*' curve"):
            GatewayConfig(embedded=True, calibration=str(bad))

    def test_the_config_travels_to_workers_with_its_calibration(self, tmp_path: Path) -> None:
        low = _flat(tmp_path, 0.05)
        settings = GatewayConfig(embedded=True, calibration=str(low))
        again = GatewayConfig.model_validate_json(settings.model_dump_json())
        assert again.calibration_choice().calibration == settings.calibration_choice().calibration


class TestServeCommand:
    def test_a_bad_file_is_one_line_naming_the_option_and_the_file(self, tmp_path: Path) -> None:
        bad = tmp_path / "cal.json"
        bad.write_text("not json")
        done = subprocess.run(
            [sys.executable, "-m", "retryctl.cli", "serve", "--embedded", "--calibration", str(bad)],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert done.returncode == 2
        assert "error: invalid --calibration=" in done.stderr and "cal.json" in done.stderr
        assert "Traceback" not in done.stderr
