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
    def test_default_question_switches_to_a_tool_and_exits_0(self, tmp_path: Path) -> None:
        proc = run_demo("--threads", "1", cwd=tmp_path)
        out = proc.stdout + proc.stderr
        assert proc.returncode == 0, out
        assert "Traceback" not in out
        assert "answer: " in proc.stdout and "accepted because" in proc.stdout
        [log] = list(tmp_path.glob("retryctl-demo-*.jsonl"))  # default: a new file here, printed
        assert str(log) in proc.stdout
        report = verify_log(log)
        assert report.ok, report.error
        verdicts = [r for r in records(log) if r["kind"] == "verdict"]
        assert "switch" in [r["action"] for r in verdicts]
        assert verdicts[-1]["action"] == "accept"
        assert records(log)[-1]["kind"] == "summary"


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

    def test_no_server_at_all_stops_cleanly(self, tmp_path: Path) -> None:
        log = tmp_path / "demo.jsonl"
        proc = run_demo(
            "--base-url", "http://127.0.0.1:9/v1", "--model-name", "x", "--timeout", "0.5", "--log", str(log),
            cwd=tmp_path,
        )  # fmt: skip
        assert "Traceback" not in proc.stdout + proc.stderr
        assert proc.returncode in (3, 4)
        assert verify_log(log).ok


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
                [str(RETRYCTL), "demo", "--base-url", fault_server.url, "--model-name", "fault",
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
        assert verify_log(tmp_path / "demo.jsonl").ok
