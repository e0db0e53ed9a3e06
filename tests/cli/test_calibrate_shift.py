"""``retryctl calibrate``: ECE per stratum on the held-out part, and ``--shift``, on hand-built results."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from retryctl.cli import app
from retryctl.evals import load_calibration

runner = CliRunner()


def _results(path: Path) -> Path:
    """small: 20 tasks right at raw 0.6; three_step: 20 tasks wrong at raw 0.6, two points each."""
    lines = []
    for stratum, right, points in (("small", True, 1), ("three_step", False, 2)):
        for i in range(20):
            point = {"target": "calculator", "fused": 0.6, "correct": right}
            lines.append(
                {"id": f"{stratum}-{i}", "status": "stopped", "stratum": stratum, "points": [point] * points}
            )
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


class TestCalibrateByStratum:
    def test_the_shift_table_and_per_stratum_figures_in_json(self, tmp_path: Path) -> None:
        results, out = _results(tmp_path / "r.jsonl"), tmp_path / "c.json"
        done = runner.invoke(app, ["calibrate", str(results), "--out", str(out), "--shift", "--json"])
        assert done.exit_code == 0, done.output
        report = json.loads(done.stdout)
        assert report["balance_strata"] is True
        assert set(report["by_stratum"]) <= {"small", "three_step", "all"}
        rows = {r["name"]: r for r in report["shift"]}
        assert set(rows) == {"leave out small", "leave out three_step"}
        # Fitted on three_step alone (40 points, all wrong): 1/42 everywhere; small is all right.
        assert rows["leave out small"]["ece_calibrated"] == pytest.approx(41 / 42)
        assert rows["leave out small"]["ece_raw"] == pytest.approx(0.4)
        assert (rows["leave out small"]["fitted_on"], rows["leave out small"]["tested_on"]) == (40, 20)
        # The fit written weighs the strata alike: 60 points, 20 of them right, say about one half.
        fitted = load_calibration(out)
        assert "strata weighted equally" in fitted.method

    def test_balanced_by_default_pooled_on_request(self, tmp_path: Path) -> None:
        results = _results(tmp_path / "r.jsonl")
        args = ["calibrate", str(results), "--holdout", "0"]
        assert runner.invoke(app, [*args, "--out", str(tmp_path / "b.json")]).exit_code == 0
        assert runner.invoke(app, [*args, "--out", str(tmp_path / "p.json"), "--pooled"]).exit_code == 0
        balanced, pooled = load_calibration(tmp_path / "b.json"), load_calibration(tmp_path / "p.json")
        # Balanced: each stratum weighs 30 of 60, so (30 + 1) / 62; pooled: (20 + 1) / 62.
        assert balanced(0.6) == pytest.approx(31 / 62)
        assert pooled(0.6) == pytest.approx(21 / 62)

    def test_the_tables(self, tmp_path: Path) -> None:
        results, out = _results(tmp_path / "r.jsonl"), tmp_path / "c.json"
        done = runner.invoke(
            app, ["calibrate", str(results), "--out", str(out), "--shift", "--holdout", "0.5"]
        )
        assert done.exit_code == 0, done.output
        assert "held-out ECE by stratum" in done.stdout
        assert "ECE under shift" in done.stdout and "leave out small" in done.stdout

    def test_without_strata_the_shift_says_there_is_nothing_to_shift(self, tmp_path: Path) -> None:
        results = tmp_path / "r.jsonl"
        point = {"target": "calculator", "fused": 0.6, "correct": True}
        results.write_text(json.dumps({"id": "a", "status": "accepted", "points": [point]}) + "\n")
        done = runner.invoke(
            app, ["calibrate", str(results), "--out", str(tmp_path / "c.json"), "--shift", "--holdout", "0"]
        )
        assert done.exit_code == 0, done.output
        assert "fewer than two strata" in done.stdout
