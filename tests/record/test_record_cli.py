"""``retryctl record`` and ``retryctl sweep`` with the real embedded model."""

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


def _tasks(tmp_path: Path) -> Path:
    path = tmp_path / "tasks.jsonl"
    path.write_text("".join(json.dumps(t) + "\n" for t in TASKS), encoding="utf-8")
    return path


ARGS = ["--samples", "2", "--max-tokens", "12", "--extract", "number"]


@needs_llama
class TestRecord:
    def test_records_a_bank_that_bench_reads_and_resumes_it(self, tmp_path: Path) -> None:
        tasks, bank = _tasks(tmp_path), tmp_path / "bank.jsonl"
        done = runner.invoke(app, ["record", str(tasks), "--out", str(bank), *ARGS])
        assert done.exit_code == 0, done.output
        questions = load_bank(bank)
        assert [q.id for q in questions] == ["a", "b"] and [q.gold for q in questions] == ["5", "12"]
        for sample in (s for q in questions for s in q.samples):
            assert sample.token_logprobs is not None and sample.tokens == len(sample.token_logprobs)
            assert sample.finish_reason in {"stop", "length"} and sample.latency_ms is not None
        line = json.loads(bank.read_text(encoding="utf-8").splitlines()[0])
        assert line["sampling"]["max_tokens"] == 12 and len(line["samples"][0]["top_logprobs"][0]) == 5
        before = bank.read_bytes()
        again = runner.invoke(app, ["record", str(tasks), "--out", str(bank), *ARGS])
        assert again.exit_code == 0 and "0 recorded now, 2 already there" in again.stdout
        assert bank.read_bytes() == before
        bench = runner.invoke(
            app, ["bench", str(bank), "--policy", "default", "--max-samples", "2", "--json"]
        )
        assert bench.exit_code == 0 and json.loads(bench.stdout)[0]["avg_tokens"] > 0

    def test_other_knobs_are_refused_and_nothing_is_written(self, tmp_path: Path) -> None:
        tasks, bank = _tasks(tmp_path), tmp_path / "bank.jsonl"
        assert runner.invoke(app, ["record", str(tasks), "--out", str(bank), *ARGS]).exit_code == 0
        before = bank.read_bytes()
        other = runner.invoke(app, ["record", str(tasks), "--out", str(bank), *ARGS, "--temperature", "1.0"])
        assert other.exit_code == 2 and "temperature=0.7; this run asks temperature=1.0" in other.stderr
        assert bank.read_bytes() == before

    def test_sweep_prints_a_row_per_point_and_writes_the_page(self, tmp_path: Path) -> None:
        tasks, out, page = _tasks(tmp_path), tmp_path / "sweep", tmp_path / "sweep.html"
        args = ["sweep", str(tasks), "--out", str(out), "--temperature", "0.5,1.0", *ARGS, "--json"]
        done = runner.invoke(app, [*args, "--html", str(page)])
        assert done.exit_code == 0, done.output
        rows = json.loads(done.stdout)
        assert [r["temperature"] for r in rows] == [0.5, 1.0] and all(r["k"] == 2 for r in rows)
        assert all(0.0 <= r["parse_failure_rate"] <= 1.0 and r["mean_tokens"] > 0 for r in rows)
        assert "<svg" in page.read_text(encoding="utf-8")


class TestBadInput:
    def test_a_bad_task_line_is_named(self, tmp_path: Path) -> None:
        tasks = tmp_path / "tasks.jsonl"
        tasks.write_text('{"id": "a", "question": "q"}\n{"id": "b"}\n', encoding="utf-8")
        done = runner.invoke(app, ["record", str(tasks), "--out", str(tmp_path / "b.jsonl")])
        assert done.exit_code == 2 and "tasks.jsonl:2" in done.stderr

    def test_the_bank_may_not_be_the_task_file(self, tmp_path: Path) -> None:
        tasks = _tasks(tmp_path)
        before = tasks.read_bytes()
        done = runner.invoke(app, ["record", str(tasks), "--out", str(tasks)])
        assert done.exit_code == 2 and "same file as task file" in done.stderr
        assert tasks.read_bytes() == before
