"""``retryctl demo`` as a user runs it: the installed script, no TTY, the embedded model or a server."""

from __future__ import annotations

import importlib.util
import json
import os
import pty
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from retryctl.audit import verify_log
from retryctl.cli import app
from tests.models._fault_server import FaultServer, Reply, cut_connection, hang, raw, status

RETRYCTL = Path(sys.executable).parent / "retryctl"
needs_llama = pytest.mark.skipif(
    importlib.util.find_spec("llama_cpp") is None, reason="llama_cpp is not importable: install 'local'"
)


def run_demo(*args: str, cwd: Path, timeout: float = 240) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(RETRYCTL), "demo", *args],
        cwd=cwd,
        stdin=subprocess.DEVNULL,  # no TTY: an ask_user verdict must end the run, not wait
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def records(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


class TestDemoEmbedded:
    @needs_llama
    def test_a_built_in_question_switches_and_ends_right_or_abstains(self, tmp_path: Path) -> None:
        from retryctl.agent._questions import DEMO_QUESTIONS

        first = DEMO_QUESTIONS[0]
        proc = run_demo(first.question, "--threads", "1", cwd=tmp_path)
        out = proc.stdout + proc.stderr
        assert "Traceback" not in out
        [log] = list(tmp_path.glob("retryctl-demo-*.jsonl"))  # default: a new file here, printed
        assert str(log) in proc.stdout
        report = verify_log(log)
        assert report.ok, report.error
        verdicts = [r for r in records(log) if r["kind"] == "verdict"]
        assert "switch" in [r["action"] for r in verdicts]
        assert records(log)[-1]["kind"] == "summary"
        # The constraint at work: the ladder, then what the model chose under it.
        assert "permutations (first): 6, 9, each as often as given" in proc.stdout
        assert "the model chose" in proc.stdout
        # The right answer accepted, or an honest abstention: never a wrong accepted answer.
        if proc.returncode == 0:
            assert verdicts[-1]["action"] == "accept" and verdicts[-1]["answer"] == first.gold, out
            assert "accepted because" in proc.stdout
        else:
            assert proc.returncode in (3, 4), out
            assert "accept" not in [r["action"] for r in verdicts]


class TestDemoAgainstAFaultyServer:
    @pytest.mark.parametrize(
        "script",
        [
            pytest.param(
                [status(429, retry_after="0"), status(500), hang(), raw(b"<html>oops"), cut_connection(),
                 status(503), raw(b'{"choices": []}'), raw(b'{"choices": [{"message": 7}]}')],
                id="mixed-then-ok",
            ),
            pytest.param(
                [hang()] * 3 + [status(429, retry_after="0"), status(502), raw(b"garbage")] * 15,
                id="hangs-then-faults-forever",
            ),
        ],
    )  # fmt: skip
    def test_never_a_traceback_exit_0_3_or_4_and_the_log_verifies(
        self, tmp_path: Path, fault_server: FaultServer, script: list[Reply]
    ) -> None:
        fault_server.script.extend(script)
        log = tmp_path / "demo.jsonl"
        proc = run_demo(
            "--base-url", fault_server.url, "--model-name", "fault", "--timeout", "0.5", "--log", str(log),
            cwd=tmp_path,
        )  # fmt: skip
        out = proc.stdout + proc.stderr
        assert "Traceback" not in out, out
        assert proc.returncode in (0, 3, 4), out
        assert fault_server.requests, "the demo never reached the server"
        report = verify_log(log)
        assert report.ok and report.records >= 2, report.error
        assert f"log: {log}" in proc.stdout
        assert "question 3 of 3: " in proc.stdout  # no question: the tour of the built-in ones

    def test_the_live_view_shows_every_error_on_one_line(
        self, tmp_path: Path, fault_server: FaultServer
    ) -> None:
        from retryctl._log import one_line
        from tests.test_log import multi_line_500

        fault_server.script.extend([multi_line_500()] * 4)  # a server's pydantic error: four lines
        log = tmp_path / "demo.jsonl"
        proc = run_demo(
            "--base-url", fault_server.url, "--model-name", "fault", "--timeout", "0.5", "--log", str(log),
            cwd=tmp_path,
        )  # fmt: skip
        reasons = [one_line(r["reason"]) for r in records(log) if r["kind"] == "verdict"]
        assert any("1 validation error for ChatRequest" in r for r in reasons), reasons
        view = proc.stdout.splitlines()
        for reason in reasons:
            assert f"    {reason}" in view  # the reason line of its verdict, whole
        assert not any(line.lstrip().startswith(("messages.0.content", "For further")) for line in view)
        warnings = proc.stderr.splitlines()
        assert warnings and all(line.startswith("warning: backend.retry ") for line in warnings)
        assert "backend.retry" not in proc.stdout

    def test_no_server_at_all_stops_cleanly(self, tmp_path: Path) -> None:
        log = tmp_path / "demo.jsonl"
        proc = run_demo(
            "--base-url", "http://127.0.0.1:9/v1", "--model-name", "x", "--timeout", "0.5", "--log", str(log),
            cwd=tmp_path,
        )  # fmt: skip
        assert "Traceback" not in proc.stdout + proc.stderr
        assert proc.returncode in (3, 4)
        assert verify_log(log).ok


class TestDemoEnding:
    def render(self, **result: Any) -> str:
        import io

        from rich.console import Console

        from retryctl.cli._demo import _render_end

        out = io.StringIO()
        _render_end(Console(file=out, width=200), {"usage": {}, **result}, 1.0)
        return out.getvalue()

    def test_the_member_that_answered_is_named(self) -> None:
        accepted = self.render(status="accepted", answer="51", text="7 * 8 - 5 = 51", served_by="calculator",
                               confidence=0.9, reason="all agree")  # fmt: skip
        assert "answer: 51  (7 * 8 - 5 = 51, by calculator)" in accepted
        asking = self.render(status="needs_user", answer="13", served_by="python", confidence=0.2,
                             reason="low\nconfidence")  # fmt: skip
        assert "best answer so far: 13 (confidence 0.20, from python)" in asking
        assert "needs a person: low; confidence" in asking  # a reason on one line
        nothing = self.render(status="stopped", answer=None, served_by=None, confidence=None, reason="x")
        assert "best answer so far: None (confidence —)" in nothing


class TestDemoArguments:
    def test_base_url_without_model_name_is_a_one_line_error(self) -> None:
        result = CliRunner().invoke(app, ["demo", "--base-url", "http://127.0.0.1:1/v1"])
        assert result.exit_code == 2
        assert "--model-name" in result.output and "Traceback" not in result.output


class TestDemoInteractive:
    def test_on_a_tty_ask_user_prompts_and_the_persons_answer_ends_the_run(
        self, tmp_path: Path, fault_server: FaultServer
    ) -> None:
        # The server's answers ("42-0", "42-1", ...) never agree: the controller ends up asking.
        master, slave = pty.openpty()
        try:
            os.write(master, b"51\n")  # waits in the terminal's line buffer until the prompt reads it
            proc = subprocess.run(
                [str(RETRYCTL), "demo", "How many?", "--base-url", fault_server.url, "--model-name", "fault",
                 "--log", str(tmp_path / "demo.jsonl")],
                stdin=slave, capture_output=True, text=True, timeout=120, check=False,
            )  # fmt: skip
        finally:
            os.close(slave)
            os.close(master)
        assert "Traceback" not in proc.stdout + proc.stderr
        assert "The controller asks you" in proc.stdout, proc.stdout
        assert proc.returncode == 0, proc.stdout
        assert "answer: 51" in proc.stdout and "given by you" in proc.stdout
        assert " user → accept  (your reply)" in proc.stdout  # the reply is shown, and logged, as a verdict
        *_, last, summary = records(tmp_path / "demo.jsonl")
        assert (last["action"], last["target"], last["extra"]["decided_by"]) == ("accept", "user", "user")
        assert summary["extra"]["served_by"] == "user"
        assert verify_log(tmp_path / "demo.jsonl").ok
