"""The python tool through the real sandbox: output, errors the model can act on, tests as signal."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from langchain_core.messages import ToolMessage

from retryctl.exceptions import ConfigError
from retryctl.sandbox import Sandbox, SandboxLimits, Tier, probe_tiers
from retryctl.tools import PythonRunReport, PythonTool
from retryctl.tools._python import build_test_harness


@pytest.fixture(scope="module")
def sandbox() -> Iterator[Sandbox]:
    best = (
        probe_tiers().best(unsafe=False)
        if any(s.available for s in probe_tiers().tiers if s.tier is not Tier.UNSAFE)
        else None
    )
    if best is None:
        pytest.skip("no isolating sandbox tier on this machine (see probe_tiers())")
    with Sandbox(tier=best, limits=SandboxLimits(max_output_bytes=16 * 1024)) as pool:
        yield pool


class TestPythonTool:
    def test_runs_code_and_reports_tests(self, sandbox: Sandbox):
        tool = PythonTool(sandbox=sandbox)
        report = tool.run_report(
            "def sq(x):\n    return x * x\nprint(sq(3))",
            ["assert sq(2) == 4", "assert sq(3) == 10", "assert sq(-1) == 1"],
        )
        assert report.result.stdout == "9\n", "the report line is removed from stdout"
        assert (report.tests_total, report.tests_passed) == (3, 2)
        assert report.confidence == pytest.approx(2 / 3)
        assert len(report.test_failures) == 1 and "sq(3) == 10" in report.test_failures[0]

    def test_crashing_code_fails_every_test(self, sandbox: Sandbox):
        report = PythonTool(sandbox=sandbox).run_report("import sys; sys.exit(0)", ["assert True"])
        assert report.tests_passed == 0 and report.confidence == 0.0
        assert "did not run" in report.test_failures[0]

    def test_no_tests_no_confidence(self, sandbox: Sandbox):
        assert PythonTool(sandbox=sandbox).run_report("print(1)").confidence is None

    def test_tool_call_returns_content_and_artifact(self, sandbox: Sandbox):
        tool = PythonTool(sandbox=sandbox)
        message = tool.invoke(
            {"name": "python", "args": {"code": "print(1/0)"}, "id": "call-1", "type": "tool_call"}
        )
        assert isinstance(message, ToolMessage)
        assert "exit code 1 (error)" in message.content and "ZeroDivisionError" in message.content
        assert isinstance(message.artifact, PythonRunReport)
        assert message.artifact.result.exit_code == 1

    def test_timeout_is_reported_as_text(self, sandbox: Sandbox):
        tool = PythonTool(sandbox=sandbox, timeout_s=0.5)
        assert "timed out" in tool.invoke({"code": "while True: pass"})

    def test_fresh_sandbox_without_a_pool(self):
        tool = PythonTool(unsafe=False)
        if not any(s.available for s in probe_tiers().tiers if s.tier is not Tier.UNSAFE):
            pytest.skip("no isolating sandbox tier on this machine")
        assert "stdout:\n42" in tool.invoke({"code": "print(6 * 7)"})

    def test_unsafe_tier_without_consent_is_a_config_error(self):
        tool = PythonTool(tier=Tier.UNSAFE)  # the unsafe tier without unsafe=True: refused
        with pytest.raises(ConfigError) as err:
            tool.run_report("print(1)")
        assert err.value.field == "tier"


class TestBuildTestHarness:
    def test_harness_is_valid_python_that_reports_with_the_nonce(self):
        source = build_test_harness("x = 1", ["assert x == 1"], "@@n@@")
        compile(source, "<h>", "exec")
        assert "@@n@@" in source and source.startswith("x = 1\n")
