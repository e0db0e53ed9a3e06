"""The command line's warnings: on stderr, one line each; stdout carries only the command's output."""

from __future__ import annotations

import io
import json
import logging
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from rich.console import Console
from rich.file_proxy import FileProxy

from retryctl.cli._stderr import OneLineHandler, install
from tests.models._fault_server import FaultServer
from tests.test_log import PYDANTIC_ERROR, multi_line_500

RETRYCTL = Path(sys.executable).parent / "retryctl"


@pytest.fixture
def handler() -> Iterator[OneLineHandler]:
    h = OneLineHandler(logging.WARNING)
    logger = logging.getLogger("retryctl.tests.stderr")
    logger.addHandler(h)
    try:
        yield h
    finally:
        logger.removeHandler(h)


class TestOneLineHandler:
    def test_a_multi_line_message_is_one_line_on_stderr(
        self, handler: OneLineHandler, capsys: pytest.CaptureFixture[str]
    ) -> None:
        logging.getLogger("retryctl.tests.stderr").warning("backend.retry error=%r", PYDANTIC_ERROR)
        logging.getLogger("retryctl.tests.stderr").error("broke:\n  here")
        out, err = capsys.readouterr()
        assert out == ""
        lines = err.splitlines()
        assert len(lines) == 2
        assert lines[0].startswith("warning: backend.retry error='1 validation error for ChatRequest\\n")
        assert lines[1] == "error: broke:; here"

    def test_another_librarys_warning_names_its_logger(self, capsys: pytest.CaptureFixture[str]) -> None:
        h = OneLineHandler(logging.WARNING)
        other = logging.getLogger("somelib")
        other.addHandler(h)
        try:
            other.warning("deprecated\nuse the new one")
            other.info("not shown")
        finally:
            other.removeHandler(h)
        assert capsys.readouterr().err == "warning: somelib: deprecated; use the new one\n"

    def test_under_a_live_view_the_line_goes_to_the_real_stderr(
        self, handler: OneLineHandler, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        # rich's live status replaces sys.stderr by a proxy that prints into the view (on stdout).
        real, view = io.StringIO(), io.StringIO()
        monkeypatch.setattr(sys, "stderr", FileProxy(Console(file=view), real))
        logging.getLogger("retryctl.tests.stderr").warning("backend.retry")
        assert (real.getvalue(), view.getvalue()) == ("warning: backend.retry\n", "")

    def test_install_adds_one_handler_however_often_it_runs(self) -> None:
        root = logging.getLogger()
        before = [h for h in root.handlers if not isinstance(h, OneLineHandler)]
        try:
            install()
            install()
            assert sum(isinstance(h, OneLineHandler) for h in root.handlers) == 1
        finally:
            for h in [h for h in root.handlers if isinstance(h, OneLineHandler)]:
                root.removeHandler(h)
            logging.captureWarnings(False)
        assert root.handlers == before


class TestCommandOutput:
    def test_batch_json_stays_json_while_a_backend_retries(
        self, tmp_path: Path, fault_server: FaultServer
    ) -> None:
        fault_server.script.extend([multi_line_500(), multi_line_500()])
        tasks = tmp_path / "tasks.jsonl"
        tasks.write_text(json.dumps({"id": "a", "question": "What is 2 + 3?"}) + "\n")
        proc = subprocess.run(
            [str(RETRYCTL), "batch", str(tasks), "--out", str(tmp_path / "out.jsonl"), "--json",
             "--base-url", fault_server.url, "--model-name", "fault", "--retry-wait", "0"],
            capture_output=True, text=True, timeout=180, check=False, stdin=subprocess.DEVNULL,
        )  # fmt: skip
        assert "Traceback" not in proc.stderr, proc.stderr
        summary = json.loads(proc.stdout)  # the whole of stdout is the summary
        assert summary["tasks"] == 1
        retries = [line for line in proc.stderr.splitlines() if "backend.retry" in line]
        assert retries, proc.stderr
        for line in retries:
            assert line.startswith("warning: backend.retry backend='fault' attempt=1 ")
            assert "1 validation error for ChatRequest" in line and "Input should be a valid string" in line
        fragments = ("messages.0.content", "For further")
        assert not any(line.lstrip().startswith(fragments) for line in proc.stderr.splitlines())
