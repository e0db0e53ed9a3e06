"""The command line behaves like the tools people know (issue 29, item 5 and a new user's trial): flags
shown bare in help, Ctrl-C ends with one line and exit 130 saying how to go on, progress lines that say
something, a file that is not a decision log told from a broken one, abstentions marked as such, and
bad arguments refused with the valid values named."""

from __future__ import annotations

import io
import json
import os
import shlex
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console
from typer.testing import CliRunner

from retryctl.cli import _COMMANDS, app
from tests.cli._demo_model import scripted_demo_model
from tests.report._logs import graph_log

runner = CliRunner()
ROOT = Path(__file__).resolve().parents[2]
SERVER = ["--base-url", "http://127.0.0.1:9/v1", "--model-name", "scripted"]
TASKS = [
    {"id": "a", "question": "Tom has 3 apples and gets 4 more. How many apples?", "gold": 7},
    {"id": "b", "question": "Ann has 2 pens and gets 5 more. How many pens?", "gold": 8},
]


def _write(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@pytest.fixture
def scripted_model(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("retryctl.agent._graph.demo_model", scripted_demo_model)


class TestHelp:
    @pytest.mark.parametrize("command", [[], *([name] for name in _COMMANDS)])
    def test_flags_show_without_a_value_type(self, command: list[str]) -> None:
        result = runner.invoke(app, [*command, "--help"], env={"COLUMNS": "200"})
        assert result.exit_code == 0, result.output
        assert "--help" in result.output
        assert "<bool>" not in result.output  # `--json <bool>` read as if it took a value

    def test_a_value_given_to_a_flag_is_refused(self, tmp_path: Path) -> None:
        result = runner.invoke(app, ["bench", str(tmp_path / "b.jsonl"), "--json", "true"])
        assert result.exit_code == 2 and "true" in result.output


class TestInterrupt:
    def test_batch_ctrl_c_says_what_was_kept_and_the_resume_command_exit_130(self, tmp_path: Path) -> None:
        rows = [
            {"id": "a", "question": "add 1 2", "gold": "3"},
            {"id": "b", "question": "add 2 2", "gold": "4"},
            {"id": "c", "question": "hang 1"},
            {"id": "d", "question": "add 3 3"},
        ]
        tasks, out = _write(tmp_path / "t.jsonl", rows), tmp_path / "r.jsonl"
        graph = "tests.batch._graphs:build"
        cmd = [sys.executable, "-m", "retryctl.cli", "batch", str(tasks), "--out", str(out), "--graph", graph]
        env = {**os.environ, "RETRYCTL_TEST_HANG": "1", "PYTHONPATH": str(ROOT)}
        proc = subprocess.Popen(
            [*cmd, "--concurrency", "1"], cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            text=True,
        )  # fmt: skip
        assert proc.stdout is not None
        for line in proc.stdout:  # until the batch blocks on the hanging task
            if line.startswith("HANG"):
                break
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
        assert proc.returncode == 130
        lines = err.strip().splitlines()
        assert len(lines) == 1 and "Traceback" not in err
        assert lines[0].startswith(f"interrupted: 2 of 4 tasks finished and kept in {out}; to continue: ")
        again = shlex.split(lines[0].split("; to continue: ", 1)[1])
        assert again[:2] == ["retryctl", "batch"] and again[-1] == "--resume"
        assert {"--concurrency", "--graph", "--out"} <= set(again)

        env.pop("RETRYCTL_TEST_HANG")
        done = subprocess.run(
            [sys.executable, "-m", "retryctl.cli", *again[1:]], cwd=ROOT, env=env, capture_output=True,
            text=True, timeout=120, check=False,
        )  # fmt: skip
        assert done.returncode == 0, done.stdout + done.stderr
        assert "resuming: 2 of 4 tasks already finished" in done.stdout
        assert sorted(json.loads(x)["id"] for x in out.read_text().splitlines()) == ["a", "b", "c", "d"]

    @pytest.mark.usefixtures("scripted_model")
    def test_record_ctrl_c_exits_130_naming_the_same_command(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        async def interrupted(*_args: object, **_kwargs: object) -> int:
            raise KeyboardInterrupt

        monkeypatch.setattr("retryctl.record.record_bank", interrupted)
        tasks, bank = _write(tmp_path / "t.jsonl", TASKS), tmp_path / "bank.jsonl"
        stages = ["--stage", "think:temperature=0.3,end=The answer is", "--stage", "answer:max_tokens=4"]
        stages += ["--stage-mode", "continue"]  # a server's way to continue a stage
        args = ["record", str(tasks), "--out", str(bank), "--samples", "2", *stages, *SERVER]
        result = runner.invoke(app, args)
        assert result.exit_code == 130
        assert f"interrupted: 0 of 2 tasks recorded and kept in {bank}; to continue: " in result.stderr
        assert shlex.split(result.stderr.split("to continue: ")[1]) == ["retryctl", *args]

    @pytest.mark.usefixtures("scripted_model")
    def test_sweep_ctrl_c_counts_every_grid_point(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        async def interrupted(*_args: object, **_kwargs: object) -> int:
            raise KeyboardInterrupt

        monkeypatch.setattr("retryctl.record.record_bank", interrupted)
        tasks, out = _write(tmp_path / "t.jsonl", TASKS), tmp_path / "sweep"
        args = ["sweep", str(tasks), "--out", str(out), "--temperature", "0.2,0.7", "--samples", "2", *SERVER]
        result = runner.invoke(app, args)
        assert result.exit_code == 130
        assert f"interrupted: 0 of 4 (task, grid point) pairs recorded and kept under {out}" in result.stderr
        again = shlex.split(result.stderr.split("to continue: ")[1])
        assert again == ["retryctl", *args]

    @pytest.mark.usefixtures("scripted_model")
    def test_a_negated_flag_is_given_back_negated(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        from retryctl.evals import _run

        async def interrupted(*_args: object, **_kwargs: object) -> None:
            raise KeyboardInterrupt

        monkeypatch.setattr(_run, "run_eval", interrupted)
        tasks, out = _write(tmp_path / "t.jsonl", TASKS), tmp_path / "run"
        result = runner.invoke(
            app, ["eval", str(tasks), "--out", str(out), "--no-baselines", "--json", *SERVER]
        )
        assert result.exit_code == 130
        again = shlex.split(result.stderr.split("to continue: ")[1])
        assert {"--no-baselines", "--json"} <= set(again) and "--baselines" not in again
        assert "--agent" not in again and "--no-agent" not in again  # defaults are left out

    @pytest.mark.usefixtures("scripted_model")
    def test_eval_ctrl_c_counts_each_file(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        from retryctl.evals import _run

        real = _run.run_eval

        async def half(tasks: list[Any], out: Path, **kwargs: Any) -> None:
            await real(tasks[:1], out, **kwargs)  # the first task's lines are written, then Ctrl-C
            raise KeyboardInterrupt

        monkeypatch.setattr(_run, "run_eval", half)
        tasks, out = _write(tmp_path / "t.jsonl", TASKS), tmp_path / "run"
        args = ["eval", str(tasks), "--out", str(out), "--samples", "2", "--tool-samples", "2", *SERVER]
        result = runner.invoke(app, args)
        assert result.exit_code == 130, result.output
        assert (
            f"interrupted: kept under {out}: 1 of 2 in agent.jsonl, 1 of 2 in baselines.jsonl; "
            "to continue: retryctl eval "
        ) in result.stderr


@pytest.mark.usefixtures("scripted_model")
class TestEvalArguments:
    def test_progress_lines_say_what_each_baseline_answered(self, tmp_path: Path) -> None:
        tasks, out = _write(tmp_path / "t.jsonl", TASKS), tmp_path / "run"
        args = ["eval", str(tasks), "--out", str(out), "--samples", "2", "--tool-samples", "2", "--no-agent"]
        result = runner.invoke(app, [*args, *SERVER, "--json"])
        assert result.exit_code == 0, result.output
        lines = [x for x in result.stderr.splitlines() if x.startswith("baselines ")]
        assert len(lines) == 2
        # Task a's gold is 7 (right), task b's is 8 (the model says 7: wrong).
        assert lines[0].startswith("baselines a: model@2 '7' (1.000 agree) ✓; model@1 '7' (1.000 agree) ✓;")
        assert "calculator@2 '7' (1.000 agree) ✓" in lines[0]
        assert "model@2 '7' (1.000 agree) ✗" in lines[1]

    def test_neither_agent_nor_baselines_is_a_usage_error(self, tmp_path: Path) -> None:
        tasks, out = _write(tmp_path / "t.jsonl", TASKS), tmp_path / "run"
        result = runner.invoke(app, ["eval", str(tasks), "--out", str(out), "--no-agent", "--no-baselines"])
        assert result.exit_code == 2
        assert "--no-agent with --no-baselines leaves nothing to evaluate" in result.stderr
        assert not out.exists()

    @pytest.mark.parametrize(("given", "hint"), [("Shipped", "did you mean 'shipped'?"), ("nonsense", "")])
    def test_an_unknown_calibration_names_the_valid_values(
        self, tmp_path: Path, given: str, hint: str
    ) -> None:
        tasks, out = _write(tmp_path / "t.jsonl", TASKS), tmp_path / "run"
        result = runner.invoke(app, ["eval", str(tasks), "--out", str(out), "--calibration", given])
        assert result.exit_code == 2
        assert f"--calibration='{given}'" in result.stderr and hint in result.stderr
        assert "--calibration takes 'shipped', 'none' or the path of a calibration file" in result.stderr
        batch = runner.invoke(
            app, ["batch", str(tasks), "--out", str(tmp_path / "r.jsonl"), "--calibration", given]
        )
        assert batch.exit_code == 2 and "--calibration takes 'shipped', 'none'" in batch.stderr

    def test_a_resume_under_another_calibration_is_refused(self, tmp_path: Path) -> None:
        tasks, out = _write(tmp_path / "t.jsonl", TASKS), tmp_path / "r.jsonl"
        done = [{"id": t["id"], "status": "accepted", "answer": "1", "calibration": "shipped"} for t in TASKS]
        out.write_text("".join(json.dumps(line) + "\n" for line in done))
        before = out.read_bytes()
        result = runner.invoke(
            app, ["batch", str(tasks), "--out", str(out), "--resume", "--calibration", "none"]
        )
        assert result.exit_code == 2
        assert f"the results already in {out} were judged under shipped" in result.stderr
        assert out.read_bytes() == before
        same = runner.invoke(
            app, ["batch", str(tasks), "--out", str(out), "--resume", "--calibration", "shipped"]
        )
        assert same.exit_code == 0, same.stderr

    def test_an_abstention_shows_no_answer_not_none(self) -> None:
        from retryctl.cli._batch_session import describe as _describe

        line = {
            "id": "b",
            "status": "needs_user",
            "answer": None,
            "confidence": 0.14,
            "gold": "3",
            "tries": 1,
        }
        assert _describe(line) == "b: needs_user no answer (confidence 0.14) \u2205"


class TestAuditNotALog:
    @pytest.mark.parametrize(
        ("content", "why"),
        [
            ("hello world\n", "its first line is not JSON"),
            (
                '{"id": "a", "question": "q"}\n{"id": "b", "question": "r"}\n',
                "its first 2 lines are JSON without",
            ),
        ],
    )
    def test_another_file_is_a_usage_error_not_a_broken_chain(
        self, tmp_path: Path, content: str, why: str
    ) -> None:
        path = tmp_path / "other.jsonl"
        path.write_text(content)
        result = runner.invoke(app, ["audit", str(path)])
        assert result.exit_code == 2
        assert f"error: {path}: not a decision log ({why}" in result.stderr
        assert "BROKEN" not in result.output

    def test_a_log_with_its_first_record_damaged_is_still_a_broken_chain(self, tmp_path: Path) -> None:
        log = graph_log(tmp_path / "decisions.jsonl")
        lines = log.read_text().splitlines()
        log.write_text("\n".join(["{not json", *lines[1:]]) + "\n")
        result = runner.invoke(app, ["audit", str(log)])
        assert result.exit_code == 1 and "chain BROKEN" in result.output

    def test_a_torn_only_line_is_a_torn_tail(self, tmp_path: Path) -> None:
        path = tmp_path / "torn.jsonl"
        path.write_text('{"schema": 1, "ha')
        result = runner.invoke(app, ["audit", str(path)])
        assert result.exit_code == 1 and "torn tail" in result.output


class TestMarks:
    def test_batch_marks_an_abstention_apart_from_a_right_answer(self) -> None:
        from retryctl.cli._batch_session import describe as _describe

        base = {"id": "q", "answer": "7", "confidence": 0.3, "correct": True}
        assert _describe({**base, "status": "accepted"}).endswith("'7' (confidence 0.30) ✓")
        stopped = _describe({**base, "status": "stopped"})
        assert stopped.endswith("'7' (confidence 0.30) ∅") and "✓" not in stopped
        assert _describe({**base, "status": "needs_user", "correct": False}).endswith(" ∅")


class TestDemo:
    def test_an_empty_question_is_refused_naming_the_argument(self) -> None:
        result = runner.invoke(app, ["demo", "  "])
        assert result.exit_code == 2
        assert "error: QUESTION is empty" in result.stderr

    @staticmethod
    def _event(attempt: int, answer: str, confidence: float, validators: float = 1.0) -> dict[str, Any]:
        from retryctl.nodes import VERDICT_EVENT

        verdict = {"action": "refine", "reason": "r", "answer": answer, "confidence": confidence,
                   "evidence": {"signals": {"validators": validators}}}  # fmt: skip
        return {"type": VERDICT_EVENT, "attempt": attempt, "target": f"m{attempt}", "verdict": verdict}

    def test_best_answer_so_far_is_the_most_confident_that_passed_its_checks(self) -> None:
        from retryctl.cli._demo import _render_end, _View

        out = io.StringIO()
        console = Console(file=out, width=200)
        view = _View(console)
        view.take((), "custom", self._event(1, "12", 0.30))
        view.take((), "custom", self._event(2, "-48", 0.90, validators=0.0))  # failed a check
        view.take((), "custom", self._event(3, "15", 0.60))
        view.take((), "custom", self._event(4, "20", 0.20))
        assert view.best == {"answer": "15", "confidence": 0.60, "attempt": 3, "target": "m3"}
        result = {"status": "stopped", "answer": "20", "confidence": 0.2, "served_by": "m4",
                  "reason": "spent", "usage": {}, "best_seen": view.best}  # fmt: skip
        _render_end(console, result, 1.0)
        text = out.getvalue()
        assert "best answer so far: 15 (confidence 0.60, attempt 3, from m3)" in text
        assert "last attempt's answer: 20 (confidence 0.20, from m4)" in text
