"""retryctl's own log events: silent for a library user who configures nothing, shown through logging or
structlog when the user configures either (``retryctl/_log.py``)."""

from __future__ import annotations

import asyncio
import json
import logging
import subprocess
import sys
import textwrap
from collections.abc import Iterator

import pytest
import structlog

from retryctl._log import get_logger, one_line, render
from retryctl.models import OpenAIBackend, RetrySettings
from tests.models._fault_server import FaultServer, Reply

PYDANTIC_ERROR = (
    "1 validation error for ChatRequest\nmessages.0.content\n  Input should be a valid string "
    "[type=string_type]\n    For further information visit https://errors.pydantic.dev/2/v/string_type"
)
"""A server's error message as pydantic words it: four lines."""


def multi_line_500() -> Reply:
    body = json.dumps({"error": {"message": PYDANTIC_ERROR, "type": "server_error"}}).encode()
    return Reply("status", status=500, body=body)


# A library user's program: one sample from a server that fails once (a retry), nothing printed by it.
PROGRAM = """
import asyncio, sys
{setup}
from retryctl.models import OpenAIBackend, RetrySettings

backend = OpenAIBackend(model="fault", base_url=sys.argv[1],
                        retry=RetrySettings(attempts=2, initial_wait_s=0, jitter=False))
candidates = asyncio.run(backend.sample([{{"role": "user", "content": "q"}}]))
assert len(candidates) == 1
"""


def run_program(url: str, setup: str = "") -> subprocess.CompletedProcess[str]:
    code = textwrap.dedent(PROGRAM).format(setup=setup)
    return subprocess.run(
        [sys.executable, "-c", code, url], capture_output=True, text=True, timeout=60, check=False
    )


@pytest.fixture
def unconfigured_structlog() -> Iterator[None]:
    """structlog as a fresh process has it; ``capture_logs`` leaves it configured, so reset after."""
    structlog.reset_defaults()
    try:
        yield
    finally:
        structlog.reset_defaults()


class TestOneLine:
    def test_folds_a_pydantic_error_to_one_line(self) -> None:
        assert one_line(PYDANTIC_ERROR) == (
            "1 validation error for ChatRequest; messages.0.content; Input should be a valid string "
            "[type=string_type]; For further information visit https://errors.pydantic.dev/2/v/string_type"
        )

    def test_keeps_a_single_line_and_drops_blank_lines(self) -> None:
        assert one_line("  plain  ") == "plain"
        assert one_line("a\n\n\nb\r\nc") == "a; b; c"
        assert one_line(ValueError("x\ny")) == "x; y"

    def test_render_quotes_strings_and_folds_every_value(self) -> None:
        line = render("backend.retry", {"backend": "gpt", "attempt": 1, "error": "a\nb", "seen": ["x\ny"]})
        assert line == "backend.retry backend='gpt' attempt=1 error='a; b' seen=['x\\ny']"
        assert "\n" not in line


class TestEventLogger:
    def test_a_library_user_who_configures_nothing_sees_nothing(self, fault_server: FaultServer) -> None:
        fault_server.script.append(multi_line_500())
        proc = run_program(fault_server.url)
        assert proc.returncode == 0, proc.stderr
        assert len(fault_server.requests) == 2  # the retry happened
        assert (proc.stdout, proc.stderr) == ("", "")

    def test_a_user_who_configures_logging_sees_it_on_one_line(self, fault_server: FaultServer) -> None:
        fault_server.script.append(multi_line_500())
        proc = run_program(fault_server.url, "import logging; logging.basicConfig(level=logging.INFO)")
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout == ""
        [line] = [ln for ln in proc.stderr.splitlines() if "retryctl" in ln]  # httpx logs its requests too
        assert line.startswith("WARNING:retryctl.models:backend.retry backend='fault' attempt=1 ")
        assert "1 validation error for ChatRequest" in line and "Input should be a valid string" in line

    def test_a_user_who_configures_structlog_gets_it_through_their_pipeline(
        self, fault_server: FaultServer
    ) -> None:
        fault_server.script.append(multi_line_500())
        setup = (
            "import structlog; structlog.configure(processors=[structlog.processors.JSONRenderer()],"
            " logger_factory=structlog.PrintLoggerFactory(sys.stderr))"
        )
        proc = run_program(fault_server.url, setup)
        assert proc.returncode == 0, proc.stderr
        [event] = [json.loads(ln) for ln in proc.stderr.splitlines()]
        assert event["event"] == "backend.retry" and event["backend"] == "fault" and event["attempt"] == 1
        assert "1 validation error for ChatRequest" in event["error"]

    def test_the_record_carries_the_fields_for_a_structured_handler(
        self, fault_server: FaultServer, caplog: pytest.LogCaptureFixture, unconfigured_structlog: None
    ) -> None:
        fault_server.script.append(multi_line_500())
        backend = OpenAIBackend(
            model="fault", base_url=fault_server.url, retry=RetrySettings(attempts=2, initial_wait_s=0)
        )
        with caplog.at_level(logging.WARNING, logger="retryctl"):
            asyncio.run(backend.sample([{"role": "user", "content": "q"}]))
        [record] = [r for r in caplog.records if r.name == "retryctl.models"]
        fields = record.__dict__["retryctl"]
        assert fields["event"] == "backend.retry" and fields["backend"] == "fault" and fields["attempt"] == 1
        assert record.levelno == logging.WARNING
        assert record.pathname.endswith("_retry.py")  # the line that logged, not the helper

    def test_capture_logs_sees_the_events(self, unconfigured_structlog: None) -> None:
        log = get_logger("retryctl.models")
        with structlog.testing.capture_logs() as captured:
            log.info("backend.n_ignored", backend="b", asked=4, got=1)
        assert captured == [
            {"event": "backend.n_ignored", "backend": "b", "asked": 4, "got": 1, "log_level": "info"}
        ]

    def test_loggers_live_under_retryctl(self) -> None:
        with pytest.raises(ValueError, match="retryctl"):
            get_logger("models")
        assert any(isinstance(h, logging.NullHandler) for h in logging.getLogger("retryctl").handlers)
