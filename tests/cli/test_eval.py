"""``retryctl eval`` and ``retryctl calibrate`` through the real command, on the embedded model."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from retryctl.cli import app
from retryctl.evals import load_calibration

runner = CliRunner()

TASKS = [
    {"id": "add", "question": "Tom has 4 apples. He gets 3 more. How many apples does Tom have?", "gold": 7,
     "stratum": "small"},
    {"id": "mul", "question": "Each box has 6 eggs. How many eggs are in 4 boxes?", "gold": 24,
     "stratum": "small"},
]  # fmt: skip


def _write(path: Path, rows: list[dict[str, object]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


class TestEval:
    def test_the_agent_and_its_baselines_in_one_run_then_a_calibration(self, tmp_path: Path) -> None:
        tasks = _write(tmp_path / "tasks.jsonl", TASKS)
        out, html = tmp_path / "run", tmp_path / "eval.html"
        args = ["eval", str(tasks), "--out", str(out), "--samples", "3", "--tool-samples", "2", "--json"]
        # The baselines alone first (as another process would run them meanwhile), then the agent.
        first = runner.invoke(app, [*args, "--no-agent", "--calibration", "none"])
        assert first.exit_code == 0, first.output
        assert (out / "baselines.jsonl").exists() and not (out / "agent.jsonl").exists()
        assert "agent" not in json.loads(first.stdout)["systems"]
        result = runner.invoke(app, [*args, "--html", str(html), "--calibration", "none"])
        assert result.exit_code == 0, result.output
        report = json.loads(result.stdout)
        assert set(report["systems"]) == {"agent", "model@3", "model@1", "calculator@2", "python@2"}
        for figures in report["systems"].values():
            assert figures["n"] == 2 and 0.0 <= figures["coverage"] <= 1.0
        assert report["systems"]["model@3"]["coverage"] <= 1.0
        assert set(report["strata"]) == {"small"}
        agent = [json.loads(line) for line in (out / "agent.jsonl").read_text().splitlines()]
        assert {r["id"] for r in agent} == {"add", "mul"}
        for line in agent:
            assert (
                "text" in line and line["stratum"] == "small"
            )  # the model's own words explain a wrong accept
            for point in line["points"]:
                assert point["target"] in ("embedded:SmolLM2-135M-Instruct.Q4_1", "calculator", "python")
                assert 0.0 <= point["fused"] <= 1.0 and isinstance(point["correct"], bool)
        baselines = [json.loads(line) for line in (out / "baselines.jsonl").read_text().splitlines()]
        assert len(baselines[0]["systems"]["model@3"]["answers"]) == 3
        page = html.read_text()
        assert "Reliability diagram" in page and "<svg" in page

        # A second run finds every task done and draws nothing.
        before = (out / "agent.jsonl").read_bytes(), (out / "baselines.jsonl").read_bytes()
        again = runner.invoke(app, [*args, "--calibration", "none"])
        assert again.exit_code == 0, again.output
        assert ((out / "agent.jsonl").read_bytes(), (out / "baselines.jsonl").read_bytes()) == before
        assert json.loads(again.stdout)["systems"] == report["systems"]

        calibration = tmp_path / "calibration.json"
        fitted = runner.invoke(
            app,
            ["calibrate", str(out / "agent.jsonl"), "--out", str(calibration), "--holdout", "0", "--json"],
        )
        assert fitted.exit_code == 0, fitted.output
        figures = json.loads(fitted.stdout)
        points = sum(len(r["points"]) for r in agent)
        assert figures["fitted_on"] == points and figures["held_out"] == 0
        assert load_calibration(calibration).curves["*"].n == points

    def test_a_task_without_gold_is_refused(self, tmp_path: Path) -> None:
        tasks = _write(tmp_path / "t.jsonl", [{"id": "x", "question": "What is 2 + 2?"}])
        result = runner.invoke(app, ["eval", str(tasks), "--out", str(tmp_path / "run")])
        assert result.exit_code == 2
        assert "task 'x' has no 'gold'" in result.stderr
        assert not (tmp_path / "run").exists()

    def test_a_calibration_file_that_is_not_one_is_named(self, tmp_path: Path) -> None:
        tasks = _write(tmp_path / "t.jsonl", TASKS)
        bad = tmp_path / "cal.json"
        bad.write_text("{}")
        result = runner.invoke(
            app, ["eval", str(tasks), "--out", str(tmp_path / "run"), "--calibration", str(bad)]
        )
        assert result.exit_code == 2
        assert "cal.json" in result.stderr and "curves" in result.stderr

    def test_an_html_page_over_the_task_file_is_refused_and_the_file_kept(self, tmp_path: Path) -> None:
        tasks = _write(tmp_path / "t.jsonl", TASKS)
        before = tasks.read_bytes()
        result = runner.invoke(
            app, ["eval", str(tasks), "--out", str(tmp_path / "run"), "--html", str(tasks)]
        )
        assert result.exit_code == 2
        assert "t.jsonl" in result.stderr
        assert tasks.read_bytes() == before and not (tmp_path / "run").exists()


class TestCalibrate:
    def test_the_calibration_may_not_overwrite_a_results_file(self, tmp_path: Path) -> None:
        point = {"target": "calculator", "fused": 0.9, "correct": True}
        line: dict[str, object] = {
            "id": "a",
            "status": "accepted",
            "answer": "4",
            "gold": "4",
            "points": [point],
        }
        results = _write(tmp_path / "r.jsonl", [line])
        before = results.read_bytes()
        result = runner.invoke(app, ["calibrate", str(results), "--out", str(results)])
        assert result.exit_code == 2
        assert "results file" in result.stderr and "no graded decision points" not in result.stderr
        assert results.read_bytes() == before
        fitted = runner.invoke(
            app, ["calibrate", str(results), "--out", str(tmp_path / "c.json"), "--holdout", "0"]
        )
        assert fitted.exit_code == 0, fitted.output  # the same file fits when the output is elsewhere

    def test_results_without_graded_points_are_refused(self, tmp_path: Path) -> None:
        results = _write(tmp_path / "r.jsonl", [{"id": "a", "status": "accepted", "answer": "4"}])
        result = runner.invoke(app, ["calibrate", str(results), "--out", str(tmp_path / "c.json")])
        assert result.exit_code == 2
        assert "no graded decision points" in result.stderr
        assert not (tmp_path / "c.json").exists()

    def test_a_file_that_is_not_results_is_named(self, tmp_path: Path) -> None:
        other = tmp_path / "notes.txt"
        other.write_text("hello\n")
        result = runner.invoke(app, ["calibrate", str(other), "--out", str(tmp_path / "c.json")])
        assert result.exit_code == 2
        assert "notes.txt" in result.stderr
