"""``retryctl record --stage`` and ``retryctl sweep --sweep-stage`` with the real embedded model."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from retryctl.banks import load_bank
from retryctl.cli import app
from tests.models.conftest import needs_llama

runner = CliRunner()
TASKS = [
    {"id": "a", "question": "What is 2 + 3?", "gold": 5},
    {"id": "b", "question": "What is 4 * 3?", "gold": 12},
]
THINK = r"think:temperature=0.3,max_tokens=10,end=\nThe answer is,end=The answer is"
ANSWER = "answer:max_tokens=4,end=."
ARGS = ["--samples", "2", "--extract", "number", "--system", "Think, then say: The answer is N."]


def _tasks(tmp_path: Path) -> Path:
    path = tmp_path / "tasks.jsonl"
    path.write_text("".join(json.dumps(t) + "\n" for t in TASKS), encoding="utf-8")
    return path


@needs_llama
class TestStagedRecord:
    def test_each_sample_keeps_its_stages_and_other_stages_are_refused(self, tmp_path: Path) -> None:
        tasks, bank = _tasks(tmp_path), tmp_path / "bank.jsonl"
        done = runner.invoke(
            app, ["record", str(tasks), "--out", str(bank), *ARGS, "--stage", THINK, "--stage", ANSWER]
        )
        assert done.exit_code == 0, done.output
        cut = 0
        for question in load_bank(bank):
            for sample in question.samples:
                assert [s.name for s in sample.stages] == ["think", "answer"]
                assert sum(s.tokens for s in sample.stages) == sample.tokens
                assert sample.stages[0].tokens <= 10 and sample.stages[1].tokens <= 4
                assert all(s.finish_reason in {"stop", "length"} for s in sample.stages)
                think, answer = sample.stage_texts() or ("", "")
                assert think + answer == sample.text
                if sample.stages[0].finish_reason == "length":  # closed with its first end string
                    cut += 1
                    assert think.endswith("\nThe answer is")
        assert cut > 0  # 10 tokens of thinking: the cap is where this model's reasoning ends
        line = json.loads(bank.read_text(encoding="utf-8").splitlines()[0])
        think_settings = line["sampling"]["stages"][0]
        assert think_settings["name"] == "think" and think_settings["temperature"] == 0.3
        assert think_settings["end"] == ["\nThe answer is", "The answer is"]
        before = bank.read_bytes()
        hotter = THINK.replace("temperature=0.3", "temperature=0.9")
        other = runner.invoke(
            app, ["record", str(tasks), "--out", str(bank), *ARGS, "--stage", hotter, "--stage", ANSWER]
        )
        assert other.exit_code == 2 and "stages=" in other.stderr and '"temperature": 0.9' in other.stderr
        unstaged = runner.invoke(app, ["record", str(tasks), "--out", str(bank), *ARGS])
        assert unstaged.exit_code == 2 and "this run asks stages=null" in unstaged.stderr
        assert bank.read_bytes() == before


@needs_llama
class TestStagedSweep:
    def test_sweeping_one_stage_holds_the_other_and_reports_each(self, tmp_path: Path) -> None:
        tasks, out = _tasks(tmp_path), tmp_path / "sweep"
        unset = THINK.replace("temperature=0.3,", "")  # the swept knob is the sweep's to set
        args = ["sweep", str(tasks), "--out", str(out), *ARGS, "--stage", unset, "--stage", ANSWER]
        args += ["--sweep-stage", "think", "--temperature", "0.2,1.0"]
        done = runner.invoke(app, [*args, "--json"])
        assert done.exit_code == 0, done.output
        rows = json.loads(done.stdout)
        assert [r["point"] for r in rows] == ["think: T=0.2 top_p=- min_p=-", "think: T=1 top_p=- min_p=-"]
        for row, temperature in zip(rows, (0.2, 1.0), strict=True):
            assert [s["name"] for s in row["stages"]] == ["think", "answer"]
            assert all(0 < s["mean_tokens"] <= cap for s, cap in zip(row["stages"], (10, 4), strict=True))
            assert all(0.0 <= s["finish"].get("length", 0.0) <= 1.0 for s in row["stages"])
            think, answer = json.loads(Path(row["bank"]).read_text(encoding="utf-8").splitlines()[0])[
                "sampling"
            ]["stages"]
            assert think["temperature"] == temperature and answer["temperature"] is None
        page = tmp_path / "sweep.html"
        # every bank is there: nothing is drawn again
        table = runner.invoke(app, [*args, "--html", str(page)], env={"COLUMNS": "80"})
        assert table.exit_code == 0, table.output
        html = page.read_text(encoding="utf-8")
        assert "Cut off at the stage&#x27;s cap" in html and "think stage&#x27;s temperature" in html
        assert html.count('<tr class="stage"><td>answer</td>') == 2
        lines = table.stdout.splitlines()
        assert max(len(line) for line in lines) <= 80
        assert sum(line.startswith("  think ") for line in lines) == 2
        assert sum(line.startswith("  answer ") for line in lines) == 2
