"""``retryctl batch`` end to end: summary, errors named, the breaker's exit, resume after a killed run,
``--checkpoints``, a torn decision log repaired on ``--resume``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
from typer.testing import CliRunner, Result

from retryctl.audit import verify_log
from retryctl.cli import app
from tests.batch import _graphs

runner = CliRunner()
GRAPH = "tests.batch._graphs:build"
ROOT = Path(__file__).resolve().parents[2]


def _tasks(path: Path, *rows: tuple[str, str, str | None]) -> Path:
    lines = [
        json.dumps({"id": i, "question": q, **({"gold": g} if g is not None else {})}) for i, q, g in rows
    ]
    path.write_text("\n".join(lines) + "\n")
    return path


def _batch(*args: str) -> Result:
    return runner.invoke(app, ["batch", *args, "--graph", GRAPH, "--retry-wait", "0"])


class TestBatchCommand:
    def test_runs_every_task_and_summarises_accuracy(self, tmp_path: Path) -> None:
        tasks = _tasks(
            tmp_path / "t.jsonl",
            ("a", "add 1 2", "3"),
            ("b", "add 2 2", "5"),
            ("c", "flaky add 3 3", None),
            ("d", "add 4 4", "8"),
        )
        out = tmp_path / "r.jsonl"
        result = _batch(str(tasks), "--out", str(out), "--concurrency", "3", "--json")
        assert result.exit_code == 0, result.output
        summary = json.loads(result.stdout)
        assert summary["accuracy"] == 2 / 3 and summary["graded"] == 3  # b's gold is wrong on purpose
        assert summary["finished"] == 4 and summary["errors"] == 0 and summary["paused"] is None
        assert sorted(r["id"] for r in map(json.loads, out.read_text().splitlines())) == ["a", "b", "c", "d"]

    def test_malformed_task_file_names_the_line(self, tmp_path: Path) -> None:
        tasks = tmp_path / "t.jsonl"
        tasks.write_text('{"id": "a", "question": "add 1 1"}\n{"id": "b", "question": 5}\n')
        result = _batch(str(tasks), "--out", str(tmp_path / "r.jsonl"))
        assert result.exit_code == 2
        assert f"{tasks}:2:" in result.output and "'question'" in result.output
        assert not (tmp_path / "r.jsonl").exists()

    def test_existing_results_need_resume(self, tmp_path: Path) -> None:
        tasks = _tasks(tmp_path / "t.jsonl", ("a", "add 1 1", None))
        out = tmp_path / "r.jsonl"
        out.write_text('{"id": "a", "status": "accepted"}\n')
        result = _batch(str(tasks), "--out", str(out))
        assert result.exit_code == 2 and "--resume" in result.output

    def test_breaker_pauses_the_batch_and_says_why(self, tmp_path: Path) -> None:
        rows = [(f"h{i}", f"hard {i}", None) for i in range(3)] + [("e", "add 1 1", None)]
        out = tmp_path / "r.jsonl"
        result = _batch(
            str(_tasks(tmp_path / "t.jsonl", *rows)),
            "--out",
            str(out),
            "--concurrency",
            "1",
            "--breaker",
            "3",
        )
        assert result.exit_code == 3, result.output
        assert (
            "batch breaker: 3 consecutive tasks ended at their maximum budget (h0, h1, h2)" in result.output
        )
        assert "1 tasks not started" in result.output
        assert [json.loads(line)["id"] for line in out.read_text().splitlines()] == ["h0", "h1", "h2"]
        # Resuming with the breaker off finishes the rest.
        again = _batch(str(tmp_path / "t.jsonl"), "--out", str(out), "--resume", "--breaker", "0")
        assert again.exit_code == 0, again.output
        assert [json.loads(line)["id"] for line in out.read_text().splitlines()] == ["h0", "h1", "h2", "e"]


class TestResumeAfterCrash:
    def test_killed_batch_resumes_and_runs_each_task_exactly_once(self, tmp_path: Path) -> None:
        rows = [
            ("a", "add 1 1", "2"),
            ("b", "add 2 2", "4"),
            ("c", "hang here", None),
            ("d", "add 3 3", "6"),
            ("e", "add 4 4", "8"),
        ]
        tasks = _tasks(tmp_path / "t.jsonl", *rows)
        out = tmp_path / "r.jsonl"
        cmd = [
            sys.executable,
            "-c",
            "from retryctl.cli import main; main()",
            "batch",
            str(tasks),
            "--out",
            str(out),
            "--graph",
            GRAPH,
            "--concurrency",
            "1",
        ]
        env = {**os.environ, "RETRYCTL_TEST_HANG": "1", "PYTHONPATH": str(ROOT)}
        proc = subprocess.Popen(
            cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        try:
            assert proc.stdout is not None
            seen = []
            for line in proc.stdout:  # blocks until the graph reaches the hanging task
                seen.append(line)
                if line.startswith("HANG"):
                    break
            else:
                raise AssertionError(
                    f"the batch ended before hanging: {seen} {proc.stderr.read() if proc.stderr else ''}"
                )
        finally:
            proc.kill()
            proc.wait(timeout=30)
        finished = [json.loads(line)["id"] for line in out.read_text().splitlines()]
        assert finished == ["a", "b"]
        # As if the crash had also cut a write short: a torn last line.
        with out.open("a") as f:
            f.write('{"id": "c", "status": "acc')

        env.pop("RETRYCTL_TEST_HANG")
        done = subprocess.run(
            [*cmd, "--resume"], check=False, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
        )
        assert done.returncode == 0, done.stdout + done.stderr
        assert (
            "cut a torn last line" in done.stdout and "resuming: 2 of 5 tasks already finished" in done.stdout
        )
        ids = [json.loads(line)["id"] for line in out.read_text().splitlines()]
        assert Counter(ids) == Counter({"a": 1, "b": 1, "c": 1, "d": 1, "e": 1})
        assert ids[:2] == ["a", "b"]


class TestBatchLog:
    def test_log_records_every_task_as_a_run_that_audit_explains(self, tmp_path: Path) -> None:
        tasks = _tasks(tmp_path / "t.jsonl", ("a", "add 1 2", "3"), ("h", "hard 1", None))
        log = tmp_path / "decisions.jsonl"
        result = _batch(
            str(tasks), "--out", str(tmp_path / "r.jsonl"), "--log", str(log), "--concurrency", "2"
        )
        assert result.exit_code == 0, result.output
        audit = json.loads(runner.invoke(app, ["audit", str(log), "--json"]).stdout)
        assert audit["ok"] is True
        assert audit["summary"]["overview"]["runs"] == 2  # one run per task, named by its id
        story = runner.invoke(app, ["audit", str(log), "--why", "h"])
        assert story.exit_code == 0 and "budget 'samples' is spent" in story.output

    def test_resume_says_when_it_repaired_a_torn_log(self, tmp_path: Path) -> None:
        tasks = _tasks(tmp_path / "t.jsonl", ("a", "add 1 2", None))
        out, log = tmp_path / "r.jsonl", tmp_path / "decisions.jsonl"
        assert _batch(str(tasks), "--out", str(out), "--log", str(log)).exit_code == 0
        with log.open("ab") as f:
            f.write(b'{"action": "acc')  # 15 bytes of a record a crash cut short
        _tasks(tasks, ("a", "add 1 2", None), ("b", "add 2 2", None))
        again = _batch(str(tasks), "--out", str(out), "--log", str(log), "--resume")
        assert again.exit_code == 0, again.output
        said = f"{log}: repaired a torn last line left by a crash: cut 15 bytes and wrote a repair record"
        assert said in again.output
        assert verify_log(log).ok
        # Nothing torn, nothing said.
        _tasks(tasks, ("a", "add 1 2", None), ("b", "add 2 2", None), ("c", "add 3 3", None))
        third = _batch(str(tasks), "--out", str(out), "--log", str(log), "--resume")
        assert third.exit_code == 0 and "repaired" not in third.output

    def test_options_the_factory_does_not_take_are_named(self, tmp_path: Path) -> None:
        tasks = _tasks(tmp_path / "t.jsonl", ("a", "add 1 2", None))
        result = _batch(str(tasks), "--out", str(tmp_path / "r.jsonl"), "--base-url", "http://127.0.0.1:9")
        assert result.exit_code == 2
        assert "takes no option(s) base_url, model_name" in result.output


PLAN_ACT = "tests.batch._graphs:plan_act"


def _checkpointed(tasks: Path, out: Path, checkpoints: Path, *args: str, graph: str = PLAN_ACT) -> Result:
    return runner.invoke(
        app,
        [
            *("batch", str(tasks), "--out", str(out), "--checkpoints", str(checkpoints)),
            *("--graph", graph, "--retry-wait", "0", *args),
        ],
    )


@pytest.fixture
def counts() -> None:
    _graphs.plans.clear()
    _graphs.acts.clear()


@pytest.mark.usefixtures("counts")
class TestCheckpoints:
    def test_a_failed_task_continues_from_its_checkpoint_on_resume(self, tmp_path: Path) -> None:
        tasks = _tasks(tmp_path / "t.jsonl", ("a", "fail 1 cli", None), ("b", "go cli", None))
        out, checkpoints = tmp_path / "r.jsonl", tmp_path / "c.sqlite"
        first = _checkpointed(tasks, out, checkpoints, "--retries", "1")
        assert first.exit_code == 1, first.output
        again = _checkpointed(tasks, out, checkpoints, "--resume")
        assert again.exit_code == 0, again.output
        lines = {
            line["id"]: line
            for line in map(json.loads, out.read_text().splitlines())
            if line["status"] != "error"
        }
        assert lines["a"]["reason"] == "plan stored" and lines["a"]["tries"] == 1
        assert _graphs.plans == {"fail 1 cli": 1, "go cli": 1}  # a's plan was not made again
        assert _graphs.acts == {"fail 1 cli": 2, "go cli": 1}

    def test_earlier_checkpoints_need_resume(self, tmp_path: Path) -> None:
        tasks = _tasks(tmp_path / "t.jsonl", ("a", "go 1", None))
        checkpoints = tmp_path / "c.sqlite"
        assert _checkpointed(tasks, tmp_path / "r.jsonl", checkpoints).exit_code == 0
        # Another batch on the same file would find task a's finished thread and take its answer.
        result = _checkpointed(tasks, tmp_path / "other.jsonl", checkpoints)
        assert result.exit_code == 2 and "already holds checkpoints; pass --resume" in result.output
        assert not (tmp_path / "other.jsonl").exists()

    def test_a_graph_that_cannot_take_a_checkpointer_is_a_usage_error(self, tmp_path: Path) -> None:
        tasks = _tasks(tmp_path / "t.jsonl", ("a", "add 1 1", None))
        result = _checkpointed(tasks, tmp_path / "r.jsonl", tmp_path / "c.sqlite", graph=GRAPH)
        assert result.exit_code == 2
        assert "cannot take a checkpointer" in result.output and GRAPH in result.output
        assert not (tmp_path / "r.jsonl").exists()

    def test_a_file_that_is_not_sqlite_is_a_usage_error(self, tmp_path: Path) -> None:
        tasks = _tasks(tmp_path / "t.jsonl", ("a", "go 1", None))
        checkpoints = tmp_path / "c.sqlite"
        checkpoints.write_text('{"id": "a", "status": "accepted"}\n' * 200)
        result = _checkpointed(tasks, tmp_path / "r.jsonl", checkpoints, "--resume")
        assert result.exit_code == 2 and "cannot use as --checkpoints" in result.output
        assert not (tmp_path / "r.jsonl").exists()
