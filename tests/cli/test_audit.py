"""``retryctl audit`` on real logs: verification, the summary, --why, --diff, --json, --html."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner, Result

import retryctl.cli._audit as audit_module
from retryctl.cli import app
from tests.report._logs import QUESTIONS, graph_log

runner = CliRunner()


@pytest.fixture(scope="module")
def log(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return graph_log(tmp_path_factory.mktemp("audit") / "decisions.jsonl")


def _audit(*args: str) -> Result:
    return runner.invoke(app, ["audit", *args])


def _tamper(src: Path, dst: Path, line: int) -> Path:
    """Copy ``src`` with the action of line ``line`` (1-based) changed, the hash left as it was."""
    lines = src.read_text().splitlines()
    record = json.loads(lines[line - 1])
    record["action"] = "stop" if record.get("action") != "stop" else "accept"
    lines[line - 1] = json.dumps(record)
    dst.write_text("\n".join(lines) + "\n")
    return dst


class TestAuditCommand:
    def test_intact_log_exits_0_and_summarises(self, log: Path) -> None:
        result = _audit(str(log))
        assert result.exit_code == 0, result.output
        assert "chain intact" in result.output
        assert f"{len(QUESTIONS)} runs" in result.output
        assert "Budget black holes" in result.output and "Cost by model and tool" in result.output

    def test_tampered_log_names_the_broken_record_and_exits_1(self, log: Path, tmp_path: Path) -> None:
        bad = _tamper(log, tmp_path / "bad.jsonl", line=3)
        result = _audit(str(bad), "--json")
        assert result.exit_code == 1
        out = json.loads(result.stdout)
        assert out["ok"] is False
        error = out["verification"][0]["error"]
        assert error["line"] == 3 and error["index"] == 2
        assert "hash mismatch" in error["problem"]
        text = _audit(str(bad))
        assert text.exit_code == 1 and "BROKEN" in text.output and ":3" in text.output

    def test_json_shape(self, log: Path) -> None:
        result = _audit(str(log), "--json")
        assert result.exit_code == 0, result.output
        out = json.loads(result.stdout)
        assert set(out) == {"verification", "ok", "summary"}
        assert out["verification"][0]["records"] == len(log.read_text().splitlines())
        assert set(out["summary"]) >= {
            "overview",
            "verdicts",
            "stop_reasons",
            "per_step",
            "cost",
            "black_holes",
            "threshold_hints",
            "accuracy",
            "samples_hist",
        }
        assert out["summary"]["accuracy"]["graded"] == len(QUESTIONS)

    def test_why_tells_one_run(self, log: Path) -> None:
        result = _audit(str(log), "--why", "run-switch")
        assert result.exit_code == 0, result.output
        assert "Run run-switch" in result.output
        assert "SWITCH" in result.output and "ACCEPT" in result.output
        assert "run-easy" not in result.output
        as_json = json.loads(_audit(str(log), "--why", "run-switch", "--json").stdout)
        assert [e.get("action") for e in as_json["why"]["events"]] == ["switch", "accept", None]

    def test_why_unknown_run_is_a_usage_error(self, log: Path) -> None:
        result = _audit(str(log), "--why", "nope")
        assert result.exit_code == 2
        assert "no record of run 'nope'" in result.output

    def test_diff_two_runs_in_a_log(self, log: Path) -> None:
        out = json.loads(_audit(str(log), "--diff", "run-easy", "run-stuck", "--json").stdout)
        assert out["diff"]["delta"]["avg_samples"] == 3

    def test_diff_two_logs_compares_policies(self, tmp_path: Path) -> None:
        three = graph_log(tmp_path / "sc3.jsonl", samples=3)
        five = graph_log(tmp_path / "sc5.jsonl", samples=5)
        result = _audit("--diff", str(three), str(five), "--json")
        assert result.exit_code == 0, result.output
        out = json.loads(result.stdout)
        assert [v["path"] for v in out["verification"]] == [str(three), str(five)]
        # Every step draws `samples` per attempt: 6 attempts in all under each policy.
        assert out["diff"]["a"]["total_samples"] == 6 * 3 and out["diff"]["b"]["total_samples"] == 6 * 5
        text = _audit("--diff", str(three), str(five))
        assert "B − A" in text.output

    def test_html_is_written(self, log: Path, tmp_path: Path) -> None:
        page = tmp_path / "report.html"
        result = _audit(str(log), "--html", str(page))
        assert result.exit_code == 0, result.output
        # No per-token data in this log; its gold answers add the reliability diagram of accepted steps.
        assert page.read_text().count('<svg class="chart"') == 5
        assert "Reliability diagram" in page.read_text()

    def test_one_pass_over_two_processes_prints_what_the_plain_path_prints(
        self, log: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        bad = _tamper(log, tmp_path / "bad.jsonl", line=5)
        for path in (log, bad):
            plain = _audit(str(path), "--json")
            monkeypatch.setattr(audit_module, "PARALLEL_MIN_BYTES", 0)  # every log takes the one-pass path
            fast = _audit(str(path), "--json")
            monkeypatch.undo()
            assert fast.exit_code == plain.exit_code
            assert json.loads(fast.stdout) == json.loads(plain.stdout)

    def test_a_large_log_with_html_takes_the_one_pass_path_with_its_steps(
        self, log: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        plain_page, fast_page = tmp_path / "plain.html", tmp_path / "fast.html"
        plain = _audit(str(log), "--json", "--html", str(plain_page))
        monkeypatch.setattr(audit_module, "PARALLEL_MIN_BYTES", 0)
        fast = _audit(str(log), "--json", "--html", str(fast_page))
        assert fast.exit_code == plain.exit_code == 0, fast.output
        assert json.loads(fast.stdout)["summary"] == json.loads(plain.stdout)["summary"]
        assert fast_page.read_text() == plain_page.read_text()

    @pytest.mark.parametrize("case", ["intact", "broken", "missing"])
    def test_the_command_exits_without_freeing_but_with_its_output_and_exit_code(
        self, log: Path, tmp_path: Path, case: str
    ) -> None:
        # `retryctl audit`, started by retryctl.cli.main, ends with os._exit (retryctl.cli._ending):
        # the output must still be flushed whole, through a pipe, and the exit code kept.
        path = {"intact": log, "broken": _tamper(log, tmp_path / "bad.jsonl", line=4)}.get(case)
        done = subprocess.run(
            [sys.executable, "-m", "retryctl.cli", "audit", str(path or tmp_path / "absent.jsonl"), "--json"],
            capture_output=True,
            text=True,
            check=False,
        )
        assert done.returncode == {"intact": 0, "broken": 1, "missing": 2}[case], done.stderr
        if case == "missing":
            assert "no such log file" in done.stderr and not done.stdout
        else:
            assert json.loads(done.stdout) == json.loads(_audit(str(path), "--json").stdout)

    @pytest.mark.parametrize(("started_by", "hard"), [("main", True), ("app", False)])
    def test_only_the_command_lines_own_process_is_ended_without_exit_handlers(
        self, log: Path, started_by: str, hard: bool
    ) -> None:
        # The audit command ends the process itself (os._exit, nothing freed, no exit handlers) when
        # `main` started it; the same command run by the app inside someone else's process returns.
        run = (
            "from retryctl.cli import main; main()"
            if started_by == "main"
            else "import sys; from retryctl.cli import app; app(sys.argv[1:])"
        )
        code = f"import atexit, sys; atexit.register(print, 'exit handlers ran', file=sys.stderr); {run}"
        done = subprocess.run(
            [sys.executable, "-c", code, "audit", str(log), "--json"],
            capture_output=True,
            text=True,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout)["ok"] is True
        assert ("exit handlers ran" in done.stderr) is not hard

    def test_missing_log_is_a_usage_error(self, tmp_path: Path) -> None:
        result = _audit(str(tmp_path / "absent.jsonl"))
        assert result.exit_code == 2 and "no such log file" in result.output

    def test_a_directory_is_a_usage_error_that_says_so(self, tmp_path: Path) -> None:
        result = _audit(str(tmp_path))
        assert result.exit_code == 2 and "is a directory" in result.output
        assert "Traceback" not in result.output
