"""The ``python`` tool: run model-written code in the sandbox, optionally with test snippets.

Errors of the code (an exception, a timeout, a limit) come back as the tool's text so the model can
fix its code; only a sandbox that cannot run at all is a tool error. With tests, the share that passed
is a confidence signal for code answers (:attr:`PythonRunReport.confidence`).
"""

from __future__ import annotations

import asyncio
import json
import secrets
from typing import Any, Literal

from langchain_core.tools import BaseTool, ToolException
from pydantic import BaseModel, ConfigDict, Field

from retryctl.sandbox import ExecResult, Sandbox, SandboxError, SandboxUnavailable, Tier, run_code

__all__ = ["PythonArgs", "PythonRunReport", "PythonTool", "build_test_harness"]

_MAX_SHOWN = 4000
"""Characters of stdout/stderr shown to the model (the report keeps the sandbox's full capture)."""


class PythonArgs(BaseModel):
    """Arguments of the ``python`` tool."""

    code: str = Field(description="Python 3 source to run. Print what you want to see.")
    tests: list[str] = Field(
        default_factory=list,
        description="Optional test snippets (e.g. 'assert f(2) == 4'), each run after the code in "
        "its namespace; an exception or failed assert fails that test.",
    )


class PythonRunReport(BaseModel):
    """What one ``python`` tool call did: the sandbox result and the tests' outcome."""

    model_config = ConfigDict(frozen=True)

    result: ExecResult
    """The sandbox result (stdout without the test-report line)."""
    tests_total: int = 0
    tests_passed: int = 0
    test_failures: list[str] = Field(default_factory=list)
    """``"test 2 `assert f(3) == 9`: AssertionError"`` for each failed test."""

    @property
    def confidence(self) -> float | None:
        """Share of tests passed, in [0, 1]; ``None`` without tests."""
        return self.tests_passed / self.tests_total if self.tests_total else None


def build_test_harness(code: str, tests: list[str], nonce: str) -> str:
    """The code, then each test run in its namespace, then one line ``nonce + JSON`` of outcomes.

    The nonce is random per call so ordinary output cannot be mistaken for the report. This makes
    tests a confidence signal, not a security boundary: code that reads its own source could forge it.
    """
    return (
        f"{code}\n\n"
        "def _retryctl_tests(_tests, _ns):\n"
        "    import json as _json\n"
        "    _out = []\n"
        "    for _i, _src in enumerate(_tests, 1):\n"
        "        try:\n"
        "            exec(compile(_src, f'<test {_i}>', 'exec'), _ns)\n"
        "            _out.append(None)\n"
        "        except BaseException as _exc:\n"
        "            _out.append(f'{type(_exc).__name__}: {_exc}'[:300])\n"
        f"    print({nonce!r} + _json.dumps(_out), flush=True)\n"
        f"_retryctl_tests({tests!r}, globals())\n"
    )


def _parse_report(stdout: str, nonce: str, total: int) -> tuple[str, list[str | None] | None]:
    lines = stdout.splitlines(keepends=True)
    for index in range(len(lines) - 1, -1, -1):
        if lines[index].startswith(nonce):
            try:
                outcomes = json.loads(lines[index][len(nonce) :])
            except ValueError:
                return stdout, None
            if isinstance(outcomes, list) and len(outcomes) == total:
                kept = "".join(lines[:index] + lines[index + 1 :])
                return kept, [o if isinstance(o, str) or o is None else str(o) for o in outcomes]
    return stdout, None


def _clip(text: str) -> str:
    return text if len(text) <= _MAX_SHOWN else text[:_MAX_SHOWN] + "\n... [cut]"


def render(report: PythonRunReport) -> str:
    """The text the model reads: what happened, the output, and which tests failed."""
    res = report.result
    if res.timed_out:
        status = f"timed out and was killed after {res.duration_ms / 1000:.1f}s"
    elif res.killed_by == "disk_quota":
        status = "killed: it wrote more than its disk quota"
    elif res.exit_code < 0:
        status = f"killed by signal {-res.exit_code} (a resource limit was reached)"
    else:
        status = f"exit code {res.exit_code}" + (" (ok)" if res.exit_code == 0 else " (error)")
    parts = [status]
    if res.stdout:
        parts.append("stdout:\n" + _clip(res.stdout) + (" [truncated]" if res.stdout_truncated else ""))
    if res.stderr:
        parts.append("stderr:\n" + _clip(res.stderr) + (" [truncated]" if res.stderr_truncated else ""))
    if report.tests_total:
        parts.append(f"tests: {report.tests_passed}/{report.tests_total} passed")
        parts += [f"- {failure}" for failure in report.test_failures]
    return "\n".join(parts)


class PythonTool(BaseTool):
    """Runs Python in the sandbox. Give it a started :class:`Sandbox` for warm (~ms) runs; without one
    each call starts a fresh sandbox (:func:`run_code`)."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    name: str = "python"
    description: str = (
        "Run Python 3 code in an isolated sandbox (no network, no files outside its work dir) and "
        "see its stdout, stderr and exit code. Optionally pass test snippets such as "
        "'assert solve(3) == 9'; the result says how many passed."
    )
    args_schema: type[BaseModel] = PythonArgs
    response_format: Literal["content", "content_and_artifact"] = "content_and_artifact"
    handle_tool_error: bool = True
    sandbox: Sandbox | None = None
    """A started pool to run in; ``None`` runs each call in a fresh sandbox."""
    timeout_s: float = 10.0
    memory_mb: int = 512
    tier: Tier | None = None
    """Force a tier for fresh-sandbox runs (ignored with ``sandbox``)."""
    unsafe: bool = False
    """Allow the unsafe tier for fresh-sandbox runs when nothing isolating is available."""

    def _execute(self, code: str) -> ExecResult:
        if self.sandbox is not None:
            return self.sandbox.run(code, timeout_s=self.timeout_s, memory_mb=self.memory_mb)
        return run_code(
            code, timeout_s=self.timeout_s, memory_mb=self.memory_mb, tier=self.tier, unsafe=self.unsafe
        )

    def run_report(self, code: str, tests: list[str] | None = None) -> PythonRunReport:
        """Run ``code`` (and ``tests``) and return the structured report."""
        tests = list(tests or [])
        nonce = "@@retryctl-tests-" + secrets.token_hex(8) + "@@"
        source = build_test_harness(code, tests, nonce) if tests else code
        try:
            result = self._execute(source)
        except (SandboxError, SandboxUnavailable) as exc:
            raise ToolException(f"the python sandbox is unavailable: {exc}") from exc
        if not tests:
            return PythonRunReport(result=result)
        stdout, outcomes = _parse_report(result.stdout, nonce, len(tests))
        if outcomes is None:  # no report line: every test counts as failed
            why = "output truncated" if result.stdout_truncated else "the code exited or crashed first"
            outcomes = [f"did not run ({why})"] * len(tests)
        failures = [
            f"test {i} `{tests[i - 1].strip()[:120]}`: {o.rstrip(': ')}"
            for i, o in enumerate(outcomes, 1)
            if o is not None
        ]
        return PythonRunReport(
            result=result.model_copy(update={"stdout": stdout}),
            tests_total=len(tests),
            tests_passed=len(tests) - len(failures),
            test_failures=failures,
        )

    def _run(self, code: str, tests: list[str] | None = None, **_: Any) -> tuple[str, PythonRunReport]:
        report = self.run_report(code, tests)
        return render(report), report

    async def _arun(self, code: str, tests: list[str] | None = None, **_: Any) -> tuple[str, PythonRunReport]:
        return await asyncio.to_thread(self._run, code, tests)
