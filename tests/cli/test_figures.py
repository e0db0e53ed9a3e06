"""One definition per figure, everywhere (issue 29, item 4): the same run's accuracy, coverage, accepted
precision and ungated accuracy read the same in ``batch``, ``eval`` and ``audit``; ``sweep`` gives
fractions; ``calibrate`` warns on a small fit and splits by task id across files.

The demo agent runs on a scripted model (``demo_model`` replaced, with a ``--base-url`` that is never
called), so that the runs are the controller's own and the same in every command.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from retryctl._scores import FIGURES, LABELS, Graded, figure_rows, scores, shares
from retryctl.cli import app
from retryctl.evals._fit import MIN_FIT_POINTS, split_of
from retryctl.models import Message, SamplingParams
from retryctl.testing import ScriptedBackend

runner = CliRunner()
SERVER = ["--base-url", "http://127.0.0.1:9/v1", "--model-name", "scripted", "--calibration", "none"]
KEYS = ("accuracy", "coverage", "accepted_precision", "ungated_accuracy")


def _scripted(*_args: object, **_kwargs: object) -> ScriptedBackend:
    def reply(messages: list[Message], params: SamplingParams) -> str:
        if params.response_format is not None:
            return json.dumps({"expression": "3 + 4"})
        return "The answer is 7."

    return ScriptedBackend([reply], model="scripted", confidence=0.95, cycle=True)


@pytest.fixture
def scripted_model(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("retryctl.agent._graph.demo_model", _scripted)


def _write(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


class TestDefinitions:
    def test_shares_are_the_definitions_scores_uses(self) -> None:
        # 6 tasks: 2 accepted right, 1 accepted wrong, 1 abstained but right, 2 abstained wrong.
        graded = [
            Graded(0.9, True), Graded(0.8, True), Graded(0.7, False),
            Graded(0.2, True, accepted=False), Graded(0.1, False, accepted=False),
            Graded(0.1, False, accepted=False),
        ]  # fmt: skip
        figures = scores(graded).summary()
        assert figures["accuracy"] == pytest.approx(2 / 6)  # accepted and right / all
        assert figures["coverage"] == pytest.approx(3 / 6)
        assert figures["accepted_precision"] == pytest.approx(2 / 3)
        assert figures["ungated_accuracy"] == pytest.approx(3 / 6)  # right, accepted or not / all
        assert {k: figures[k] for k in KEYS} == shares(n=6, accepted=3, accepted_right=2, right=3)
        assert set(figures) - {"n"} == set(FIGURES)  # every printed figure has its one definition

    def test_no_tasks_no_division(self) -> None:
        assert shares(n=0, accepted=0, accepted_right=0, right=0) == {
            "accuracy": 0.0, "coverage": 0.0, "accepted_precision": None, "ungated_accuracy": 0.0,
        }  # fmt: skip


@pytest.mark.usefixtures("scripted_model")
class TestOneRunThreeCommands:
    def test_batch_eval_and_audit_agree_on_every_figure(self, tmp_path: Path) -> None:
        rows = [
            {"id": "a", "question": "Tom has 3 apples and gets 4 more. How many apples?", "gold": 7},
            {"id": "b", "question": "Ann has 3 pens and gets 4 more. How many pens?", "gold": 7},
            {"id": "c", "question": "Li has 3 cups and gets 4 more. How many cups?", "gold": 8},
        ]
        tasks, out, log = _write(tmp_path / "t.jsonl", rows), tmp_path / "r.jsonl", tmp_path / "d.jsonl"
        batch = runner.invoke(
            app, ["batch", str(tasks), "--out", str(out), "--log", str(log), "--json", *SERVER]
        )
        assert batch.exit_code == 0, batch.output
        from_batch = json.loads(batch.stdout)
        audit = runner.invoke(app, ["audit", str(log), "--json"])
        assert audit.exit_code == 0, audit.output
        from_audit = json.loads(audit.stdout)["summary"]["accuracy"]
        assert from_batch["brier"] is not None and from_batch["auroc"] is not None
        run = tmp_path / "run"
        evaluated = runner.invoke(
            app, ["eval", str(tasks), "--out", str(run), "--no-baselines", "--json", *SERVER]
        )
        assert evaluated.exit_code == 0, evaluated.output
        from_eval = json.loads(evaluated.stdout)["systems"]["agent"]

        assert from_batch["graded"] == from_audit["graded"] == from_eval["n"] == 3
        for key in KEYS:
            assert from_batch[key] == pytest.approx(from_audit[key]) == pytest.approx(from_eval[key]), key
        for key in ("ece", "brier", "auroc"):
            assert from_batch[key] == pytest.approx(from_audit[key]) == pytest.approx(from_eval[key]), key
        assert from_batch["accuracy"] == pytest.approx(2 / 3)  # c's gold is wrong on purpose

        # The tables say the same, by the same labels (retryctl._scores.LABELS) and the same cells.
        want = dict(figure_rows(from_batch))
        assert want == dict(figure_rows(from_audit)) == dict(figure_rows(from_eval))
        assert set(want) == set(LABELS.values())
        assert all(set(FIGURES) <= set(figures) for figures in (from_batch, from_audit, from_eval))
        table = runner.invoke(app, ["audit", str(log)]).stdout
        summary = runner.invoke(app, ["batch", str(tasks), "--out", str(out), "--resume", *SERVER]).stdout
        for shown in (_rows(table), _rows(summary)):
            assert {label: shown[label] for label in want} == want
        tables = runner.invoke(app, ["eval", str(tasks), "--out", str(run), "--no-baselines", *SERVER]).stdout
        header, agent = _columns(tables, "agent")
        assert {label: agent[header.index(label)] for label in want} == want
        assert "%" not in summary + table and "—" not in summary + table + tables
        # Samples: the audit's count every try, the batch's the finishing one (test_resumed_figures.py);
        # on a run never interrupted they are one number.
        every, finishing = _rows(table), _rows(summary)
        assert every["average samples (all tries)"] == finishing["average samples (finishing try)"]


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.replace("┃", "│").split("│")[1:-1]]


def _rows(text: str) -> dict[str, str]:
    """A figure/value table's rows, label to cell."""
    return {cells[0]: cells[1] for cells in map(_cells, text.splitlines()) if len(cells) == 2}


def _columns(text: str, system: str) -> tuple[list[str], list[str]]:
    """A table's header cells and the cells of ``system``'s row."""
    lines = [_cells(line) for line in text.splitlines()]
    header = next(c for c in lines if c[:1] == ["system"])
    return header, next(c for c in lines if c[:1] == [system])


class TestSweepFigures:
    def test_accuracies_are_fractions_like_the_rates(self, tmp_path: Path) -> None:
        from retryctl.record._sweep import GridPoint, point_figures

        def line(qid: str, answers: list[str]) -> dict[str, Any]:
            samples = [{"text": f"The answer is {a}.", "answer": a, "tokens": 5} for a in answers]
            return {"id": qid, "question": "q?", "gold": "1", "samples": samples}

        bank = _write(tmp_path / "b.jsonl", [line("x", ["1", "1", "2"]), line("y", ["2", "2", "1"])])
        figures = point_figures(GridPoint(temperature=0.7, top_p=None, min_p=None), bank)
        assert figures["majority_accuracy"] == 0.5  # not 50.0
        assert 0.0 <= figures["default_accuracy"] <= 1.0 and 0.0 <= figures["parse_failure_rate"] <= 1.0


def _points(path: Path, ids: list[str], *, right: bool) -> Path:
    point = {"target": "calculator", "fused": 0.6, "correct": right}
    return _write(path, [{"id": i, "status": "stopped", "points": [point]} for i in ids])


class TestCalibrate:
    def test_a_small_fit_is_written_with_a_warning(self, tmp_path: Path) -> None:
        results, out = (
            _points(tmp_path / "r.jsonl", [f"t{i}" for i in range(18)], right=True),
            tmp_path / "c.json",
        )
        done = runner.invoke(app, ["calibrate", str(results), "--out", str(out), "--holdout", "0", "--json"])
        assert done.exit_code == 0, done.output
        assert (
            f"warning: fitted on 18 decision points of 18 tasks, fewer than {MIN_FIT_POINTS}" in done.stderr
        )
        assert len(json.loads(done.stdout)["warnings"]) == 1 and out.exists()

    def test_enough_points_no_warning(self, tmp_path: Path) -> None:
        ids = [f"t{i}" for i in range(MIN_FIT_POINTS)]
        results, out = _points(tmp_path / "r.jsonl", ids, right=True), tmp_path / "c.json"
        done = runner.invoke(app, ["calibrate", str(results), "--out", str(out), "--holdout", "0", "--json"])
        assert done.exit_code == 0 and "warning" not in done.stderr
        assert json.loads(done.stdout)["warnings"] == []

    def test_a_task_in_two_files_counts_once_by_the_last_file(self, tmp_path: Path) -> None:
        ids = [f"t{i}" for i in range(40)]
        first = _points(tmp_path / "first.jsonl", ids, right=True)
        second = _points(tmp_path / "second.jsonl", ids, right=False)
        done = runner.invoke(
            app, ["calibrate", str(first), str(second), "--out", str(tmp_path / "c.json"), "--json"]
        )
        assert done.exit_code == 0, done.output
        report = json.loads(done.stdout)
        held = sum(split_of(i, 0.3) for i in ids)
        assert 0 < held < len(ids)
        # One point per task (the second file's line), each task on one side of the split.
        assert report["held_out"] == held and report["fitted_on"] == len(ids) - held
        assert "note: 40 task ids are in more than one file" in done.stderr
        saved = json.loads((tmp_path / "c.json").read_text())
        assert saved["curves"]["*"]["n"] == len(ids) - held and saved["curves"]["*"]["calibrated"][0] < 0.5

    def test_the_same_file_twice_fits_what_it_fits_once(self, tmp_path: Path) -> None:
        results = _points(tmp_path / "r.jsonl", [f"t{i}" for i in range(30)], right=True)
        once = runner.invoke(app, ["calibrate", str(results), "--out", str(tmp_path / "a.json"), "--json"])
        twice = runner.invoke(
            app, ["calibrate", str(results), str(results), "--out", str(tmp_path / "b.json"), "--json"]
        )
        assert once.exit_code == twice.exit_code == 0, twice.output
        keys = ("fitted_on", "held_out", "curves")
        assert {k: json.loads(once.stdout)[k] for k in keys} == {k: json.loads(twice.stdout)[k] for k in keys}

    def test_too_few_tasks_to_hold_any_out_is_said(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        ids = [i for i in (f"t{n}" for n in range(100)) if not split_of(i, 0.3)][:3]
        (tmp_path / "a").mkdir()
        (tmp_path / "b").mkdir()
        one = _points(tmp_path / "a" / "agent.jsonl", ids[:2], right=True)
        two = _points(tmp_path / "b" / "agent.jsonl", ids[2:], right=False)
        monkeypatch.chdir(tmp_path)
        done = runner.invoke(app, ["calibrate", str(one), str(two), "--out", "c.json"])
        assert done.exit_code == 0, done.output
        assert "warning: too few tasks to hold any out: 3 tasks, holdout 0.3" in done.stderr
        source = json.loads((tmp_path / "c.json").read_text())["source"]
        assert source.endswith("(a/agent.jsonl, b/agent.jsonl)"), source
