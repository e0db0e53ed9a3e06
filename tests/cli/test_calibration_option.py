"""``--calibration`` of ``retryctl batch`` and ``retryctl eval``: one meaning for both, a bad file
refused before anything is written, and the label on every result line and in the summary.

The demo agent runs on a scripted model (``demo_model`` replaced, with a ``--base-url`` that is never
called): what is tested is which calibration reaches the verdicts, not the model.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner, Result

from retryctl.cli import app
from retryctl.controller import Calibration, CalibrationCurve
from tests.cli._demo_model import scripted_demo_model

runner = CliRunner()
SERVER = ["--base-url", "http://127.0.0.1:9/v1", "--model-name", "scripted"]
TASKS = [
    {
        "id": "a",
        "question": "Tom has 3 apples and gets 4 more. How many apples?",
        "gold": 7,
        "stratum": "small",
    },
    {"id": "b", "question": "Ann has 2 pens and gets 5 more. How many pens?", "gold": 7, "stratum": "small"},
]


@pytest.fixture(autouse=True)
def scripted_model(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("retryctl.agent._graph.demo_model", scripted_demo_model)


def _tasks(tmp_path: Path) -> Path:
    path = tmp_path / "tasks.jsonl"
    path.write_text("".join(json.dumps(t) + "\n" for t in TASKS))
    return path


def _flat(tmp_path: Path, value: float) -> Path:
    """A calibration saying ``value`` whatever the raw confidence."""
    path = tmp_path / f"flat-{value}.json"
    curve = CalibrationCurve(raw=(0.0,), calibrated=(value,))
    path.write_text(Calibration(curves={"*": curve}, source="flat").model_dump_json())
    return path


def _lines(path: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def _batch(*args: str) -> Result:
    return runner.invoke(app, ["batch", *args, "--retry-wait", "0", *SERVER])


class TestBatch:
    def test_another_model_without_a_file_is_uncalibrated_plainly(self, tmp_path: Path) -> None:
        out = tmp_path / "r.jsonl"
        result = _batch(str(_tasks(tmp_path)), "--out", str(out), "--json")
        assert result.exit_code == 0, result.output
        assert json.loads(result.stdout)["calibration"] == "uncalibrated"
        assert "calibration: uncalibrated: confidences are the raw fused ones" in result.stderr
        lines = _lines(out)
        assert [line["calibration"] for line in lines] == ["uncalibrated"] * 2
        assert [line["status"] for line in lines] == ["accepted"] * 2  # raw agreement clears 0.8

    def test_a_file_reaches_every_verdict(self, tmp_path: Path) -> None:
        out, low = tmp_path / "r.jsonl", _flat(tmp_path, 0.05)
        result = _batch(str(_tasks(tmp_path)), "--out", str(out), "--calibration", str(low))
        assert result.exit_code == 0, result.output
        lines = _lines(out)
        assert {line["calibration"] for line in lines} == {str(low)}
        # Every answer now says P(correct) 0.05: none is accepted, and the confidence says so.
        assert all(line["status"] != "accepted" and line["confidence"] == 0.05 for line in lines)

    @pytest.mark.parametrize("content", ["{}", "not json", None])
    def test_a_bad_file_is_named_with_the_option_and_nothing_is_written(
        self, tmp_path: Path, content: str | None
    ) -> None:
        bad = tmp_path / "cal.json"
        if content is not None:
            bad.write_text(content)
        out, log = tmp_path / "r.jsonl", tmp_path / "log.jsonl"
        result = _batch(
            str(_tasks(tmp_path)), "--out", str(out), "--log", str(log), "--calibration", str(bad)
        )
        assert result.exit_code == 2
        assert "--calibration" in result.stderr and "cal.json" in result.stderr
        assert "Traceback" not in result.output
        assert not out.exists() and not log.exists()

    def test_shipped_is_refused_for_another_model(self, tmp_path: Path) -> None:
        result = _batch(str(_tasks(tmp_path)), "--out", str(tmp_path / "r.jsonl"), "--calibration", "shipped")
        assert result.exit_code == 2 and "embedded model's" in result.stderr
        assert not (tmp_path / "r.jsonl").exists()

    def test_a_graph_of_ones_own_sets_its_own(self, tmp_path: Path) -> None:
        result = runner.invoke(
            app,
            ["batch", str(_tasks(tmp_path)), "--out", str(tmp_path / "r.jsonl"), "--graph",
             "tests.batch._graphs:build", "--calibration", "none"],
        )  # fmt: skip
        assert result.exit_code == 2 and "applies to the demo agent" in result.stderr


class TestEval:
    def test_the_label_is_in_the_report_and_the_agent_lines(self, tmp_path: Path) -> None:
        out, high = tmp_path / "run", _flat(tmp_path, 0.97)
        args = ["eval", str(_tasks(tmp_path)), "--out", str(out), "--samples", "3", "--tool-samples", "2"]
        result = runner.invoke(app, [*args, "--calibration", str(high), "--json", *SERVER])
        assert result.exit_code == 0, result.output
        report = json.loads(result.stdout)
        assert report["calibration"] == str(high)
        assert {line["calibration"] for line in _lines(out / "agent.jsonl")} == {str(high)}
        assert report["systems"]["agent"]["accepted_precision"] == 1.0
        # Each system's risk–coverage curve and the selective figures, in the JSON.
        assert set(report["risk_coverage"]) == set(report["systems"])
        assert report["selective"]["agent"]["coverage"] == 1.0
        assert report["selective"]["oracle"]["majority"]["answerable"] == 1.0

        page = tmp_path / "eval.html"
        text = runner.invoke(app, [*args, "--calibration", str(high), "--html", str(page), *SERVER])
        assert text.exit_code == 0, text.output
        assert "Precision at coverage" in page.read_text() and "oracle: a sample right" in page.read_text()
        assert "P@0.3" in text.stdout and "oracle: a majority right" in text.stdout
        assert "agent at coverage 1.000: precision 1.000; best member's curve there:" in text.stdout
        assert f"calibration: {high} (flat)" in text.stdout

    def test_without_a_file_another_model_is_uncalibrated(self, tmp_path: Path) -> None:
        out = tmp_path / "run"
        args = ["eval", str(_tasks(tmp_path)), "--out", str(out), "--no-baselines", "--json", *SERVER]
        result = runner.invoke(app, args)
        assert result.exit_code == 0, result.output
        assert json.loads(result.stdout)["calibration"] == "uncalibrated"
        assert "calibration: uncalibrated" in result.stderr

    def test_a_bad_file_is_refused_before_the_run(self, tmp_path: Path) -> None:
        bad = tmp_path / "cal.json"
        bad.write_text('{"curves": {"*": {"raw": [0.5, 0.4], "calibrated": [0.1, 0.2]}}}')
        out = tmp_path / "run"
        result = runner.invoke(
            app, ["eval", str(_tasks(tmp_path)), "--out", str(out), "--calibration", str(bad), *SERVER]
        )
        assert result.exit_code == 2
        assert (
            "--calibration" in result.stderr and "cal.json" in result.stderr and "curves.*" in result.stderr
        )
        assert not out.exists()


class TestBadValueOneShape:
    """A value that is no calibration reads the same in ``batch``, ``eval`` and ``serve``: one ``error:``
    line naming the option, the value and what is wrong, exit 2."""

    @staticmethod
    def _refusals(tmp_path: Path, value: str) -> list[str]:
        tasks = _tasks(tmp_path)
        commands = [
            ["batch", str(tasks), "--out", str(tmp_path / "r.jsonl"), *SERVER],
            ["eval", str(tasks), "--out", str(tmp_path / "run"), "--no-baselines", *SERVER],
            ["serve", "--upstream", "http://127.0.0.1:9/v1", "--upstream-model", "m"],
        ]
        lines = []
        for command in commands:
            done = runner.invoke(app, [*command, "--calibration", value])
            assert done.exit_code == 2, done.output
            assert len(done.stderr.strip().splitlines()) == 1, done.stderr
            lines.append(done.stderr.strip())
        assert not (tmp_path / "r.jsonl").exists() and not (tmp_path / "run").exists()
        return lines

    def test_a_task_file_is_not_a_calibration_file(self, tmp_path: Path) -> None:
        tasks = str(_tasks(tmp_path))
        lines = self._refusals(tmp_path, tasks)
        assert len(set(lines)) == 1
        assert lines[0].startswith(f"error: invalid --calibration={tasks!r}: not a calibration file: ")
        assert "retryctl calibrate writes one" in lines[0] and "Invalid JSON" not in lines[0]

    def test_an_empty_value_is_called_empty(self, tmp_path: Path) -> None:
        lines = self._refusals(tmp_path, "")
        assert len(set(lines)) == 1
        assert lines[0].startswith("error: invalid --calibration='': an empty value; --calibration takes")
        assert "directory" not in lines[0]
