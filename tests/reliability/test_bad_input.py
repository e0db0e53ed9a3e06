"""Bad input, table by table (issue #7, part 3).

Every wrong config, malformed task file, bank or decision log, oversized input and non-UTF-8 text ends
in one clear error that names the field or the line (and the bad value); from the command line that is
exit code 2 (1 for a broken log) and one line on stderr, never a traceback. Nothing already written is
lost: a results file or decision log that held good lines before the bad input holds them after it,
byte for byte, and still continues.
"""

from __future__ import annotations

import json
import math
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pydantic
import pytest
from langchain_core.messages import HumanMessage
from typer.testing import CliRunner, Result

import retryctl.banks
from retryctl.audit import DecisionLog, read_records, verify_log
from retryctl.banks import load_bank
from retryctl.batch import BatchConfig, load_tasks, read_results
from retryctl.batch._files import MAX_TASK_LINE_BYTES
from retryctl.cli import app
from retryctl.controller import Budget, Policy, Usage
from retryctl.controller.stopping import parse_stopping_rule as parse_rule
from retryctl.exceptions import (
    BankFormatError,
    ConfigError,
    LogIntegrityError,
    TaskFormatError,
    UnknownPolicyError,
)
from retryctl.models import EmbeddedBackend, OpenAIBackend, RetrySettings, SamplingParams
from retryctl.nodes import ControlledStep
from retryctl.sandbox import SandboxLimits, SandboxUnavailable, detect_tier
from retryctl.testing import ScriptedBackend
from retryctl.tools import CalculatorTool, PythonTool, calculate
from retryctl.tools._calculator import MAX_EXPRESSION_CHARS, CalculatorError
from tests.audit.helpers import make_verdict

GRAPH = "tests.batch._graphs:build"
ROOT = Path(__file__).resolve().parents[2]
NAN, INF = math.nan, math.inf
runner = CliRunner()


def _one_error_line(result: Result, code: int = 2) -> str:
    """The CLI failed with ``code``, printed exactly one ``error:`` line on stderr and no traceback."""
    assert result.exit_code == code, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    assert "Traceback" not in result.output
    return lines[0]


def _scripted(name: str = "m") -> ScriptedBackend:
    return ScriptedBackend(["The answer is 1"], model=name)


# -- wrong configs ---------------------------------------------------------------------------------

Factory = Callable[[], object]


def make(build: Callable[..., object], /, *args: Any, **kwargs: Any) -> Factory:
    """``build(*args, **kwargs)`` later: the table holds wrong types on purpose, past the type checker."""
    return lambda: build(*args, **kwargs)


V = pydantic.ValidationError
CONFIGS: list[Any] = [
    # Policy (pydantic): thresholds, limits, unknown keys, unknown names.
    pytest.param(make(Policy, accept_threshold=NAN), V, "accept_threshold", "nan", id="policy-threshold-nan"),
    pytest.param(make(Policy, accept_threshold=INF), V, "accept_threshold", "inf", id="policy-threshold-inf"),
    pytest.param(make(Policy, accept_threshold="high"), V, "accept_threshold", "'high'",
                 id="policy-threshold-wrong-type"),
    pytest.param(make(Policy, accept_treshold=0.5), V, "accept_treshold", "Extra inputs are not permitted",
                 id="policy-unknown-key"),
    pytest.param(make(Policy, max_retries=-1), V, "max_retries", "-1", id="policy-negative-retries"),
    pytest.param(make(Policy, max_samples=2.5), V, "max_samples", "2.5", id="policy-fractional-samples"),
    pytest.param(make(Policy, weights={"agreement": INF}), V, "weights", "inf", id="policy-weight-inf"),
    pytest.param(make(Policy, weights={"agreement": NAN}), V, "weights", "nan", id="policy-weight-nan"),
    pytest.param(make(Policy, stopping="magic"), V, "stopping", "'magic'", id="policy-unknown-stopping-rule"),
    pytest.param(make(Policy, min_samples=5, max_samples=2), V, "min_samples", "5",
                 id="policy-min-above-max"),
    pytest.param(make(Policy, low_confidence=("panic",)), V, "low_confidence", "'panic'",
                 id="policy-unknown-escalation"),
    # Budget and Usage (pydantic, finite numbers only).
    pytest.param(make(Budget, samples=-1), V, "samples", "-1", id="budget-negative"),
    pytest.param(make(Budget, usd=NAN), V, "usd", "nan", id="budget-usd-nan"),
    pytest.param(make(Budget, wall_s=INF), V, "wall_s", "inf", id="budget-wall-inf"),
    pytest.param(make(Budget, samples="many"), V, "samples", "'many'", id="budget-wrong-type"),
    pytest.param(make(Budget, tokens=5), V, "tokens", "Extra inputs", id="budget-unknown-key"),
    pytest.param(make(Usage, usd=-0.5), V, "usd", "-0.5", id="usage-negative"),
    # Stopping-rule names.
    pytest.param(make(parse_rule, "magic"), UnknownPolicyError, "known:", "'magic'", id="rule-unknown"),
    pytest.param(make(parse_rule, "ac-beta:nan"), ConfigError, "threshold", "nan", id="rule-nan-knob"),
    pytest.param(make(parse_rule, "default:inf"), ConfigError, "threshold", "inf", id="rule-inf-knob"),
    pytest.param(make(parse_rule, "esc:0"), ConfigError, "window", "0", id="rule-zero-window"),
    pytest.param(make(parse_rule, "esc:2.5"), ConfigError, "policy", "'esc:2.5'", id="rule-float-window"),
    pytest.param(make(parse_rule, "sc-0"), ConfigError, "n", "0", id="rule-sc-zero"),
    pytest.param(make(parse_rule, 5), ConfigError, "policy", "5", id="rule-not-a-string"),
    # The batch runner's config.
    pytest.param(make(BatchConfig, concurrency=0), ConfigError, "concurrency", "0", id="batch-concurrency-0"),
    pytest.param(make(BatchConfig, concurrency="4"), ConfigError, "concurrency", "'4'",
                 id="batch-concurrency-str"),
    pytest.param(make(BatchConfig, retry_wait_s=NAN), ConfigError, "retry_wait_s", "nan",
                 id="batch-retry-wait-nan"),
    pytest.param(make(BatchConfig, retry_wait_s=-1.0), ConfigError, "retry_wait_s", "-1.0",
                 id="batch-retry-wait-negative"),
    pytest.param(make(BatchConfig, breaker_k=0), ConfigError, "breaker_k", "0", id="batch-breaker-0"),
    pytest.param(make(BatchConfig, concurrrency=2), TypeError, "concurrrency", "unexpected keyword",
                 id="batch-unknown-key"),
    # Model backends and their settings.
    pytest.param(make(OpenAIBackend, model=""), ConfigError, "model", "''", id="openai-no-model"),
    pytest.param(make(OpenAIBackend, model="m", timeout_s=NAN), ConfigError, "timeout_s", "nan",
                 id="openai-timeout-nan"),
    pytest.param(make(OpenAIBackend, model="m", timeout_s="30"), ConfigError, "timeout_s", "'30'",
                 id="openai-timeout-str"),
    pytest.param(make(OpenAIBackend, model="m", n_mode="both"), ConfigError, "n_mode", "'both'",
                 id="openai-n-mode"),
    pytest.param(make(RetrySettings, initial_wait_s=NAN), ConfigError, "initial_wait_s", "nan",
                 id="retry-wait-nan"),
    pytest.param(make(RetrySettings, attempts=0), ConfigError, "attempts", "0", id="retry-attempts-0"),
    pytest.param(make(EmbeddedBackend, n_ctx=8), ConfigError, "n_ctx", "8", id="embedded-n-ctx-small"),
    pytest.param(make(EmbeddedBackend, n_ctx="2048"), ConfigError, "n_ctx", "'2048'",
                 id="embedded-n-ctx-str"),
    pytest.param(make(EmbeddedBackend, n_threads=0), ConfigError, "n_threads", "0", id="embedded-threads-0"),
    pytest.param(make(SamplingParams, temperature=NAN), ConfigError, "temperature", "nan",
                 id="sampling-temperature-nan"),
    pytest.param(make(SandboxLimits, max_output_bytes=10), V, "max_output_bytes", "10",
                 id="sandbox-output-cap-too-small"),
    # ControlledStep's arguments: refused when built, not at the first draw inside a graph run.
    pytest.param(make(ControlledStep, []), ConfigError, "models", "[]", id="step-no-models"),
    pytest.param(make(ControlledStep, "gpt-4o"), ConfigError, "models[0]", "'gpt-4o'",
                 id="step-model-is-a-name"),
    pytest.param(lambda: ControlledStep([_scripted(), _scripted()]), ConfigError, "models", "['m', 'm']",
                 id="step-duplicate-models"),
    pytest.param(make(ControlledStep, _scripted(), policy={"accept_threshold": 2}), ConfigError,
                 "policy", "'accept_threshold': 2", id="step-policy-dict"),
    pytest.param(make(ControlledStep, _scripted(), budget={"samples": 3}), ConfigError, "budget",
                 "'samples': 3", id="step-budget-dict"),
    pytest.param(lambda: ControlledStep(_scripted(), step_id=""), ConfigError, "step_id", "''",
                 id="step-empty-id"),
]  # fmt: skip


class TestWrongConfig:
    @pytest.mark.parametrize(("build", "error", "field", "value"), CONFIGS)
    def test_refused_naming_the_field_and_value(
        self, build: Factory, error: type[Exception], field: str, value: str
    ) -> None:
        with pytest.raises(error) as info:
            build()
        message = str(info.value)
        assert field in message and value in message, message
        if isinstance(info.value, ConfigError):
            assert info.value.field == field
        if isinstance(info.value, pydantic.ValidationError):
            [err] = info.value.errors()  # one problem, reported once
            assert not err["loc"] or err["loc"][0] == field


# -- malformed task files --------------------------------------------------------------------------

A = b'{"id": "a", "question": "add 1 1"}\n'
B = b'{"id": "b", "question": "add 2 2", "gold": 4}\n'

TASK_FILES: list[Any] = [
    pytest.param(A + B + b"{not json\n", 3, "not JSON", id="bad-json-line-3"),
    pytest.param(A + b'{"question": "q"}\n', 2, "'id'", id="missing-id"),
    pytest.param(A + b'{"id": "x"}\n', 2, "'question'", id="missing-question"),
    pytest.param(A + b'{"id": "x", "question": "  "}\n', 2, "'question'", id="blank-question"),
    pytest.param(A + B + A, 3, "duplicate id 'a' (first on line 1)", id="duplicate-id"),
    pytest.param(b'{"id": 1, "question": "q"}\n{"id": "1", "question": "q"}\n', 2, "duplicate id '1'",
                 id="duplicate-id-int-and-str"),
    pytest.param(A + b'{"id": [1], "question": "q"}\n', 2, "'id' must be", id="id-wrong-type"),
    pytest.param(A + b'{"id": true, "question": "q"}\n', 2, "got True", id="id-bool"),
    pytest.param(A + b'{"id": "x", "question": 5}\n', 2, "got 5", id="question-wrong-type"),
    pytest.param(A + b'{"id": "x", "question": "q", "gold": {"v": 1}}\n', 2, "'gold'", id="gold-object"),
    pytest.param(A + b'{"id": "x", "question": "q", "gold": NaN}\n', 2, "got nan", id="gold-nan"),
    pytest.param(A + b'{"id": "x", "question": "q", "gold": 1e400}\n', 2, "got inf", id="gold-overflow"),
    pytest.param(A + b'{"id": "x", "question": "q", "gold": false}\n', 2, "got False", id="gold-bool"),
    pytest.param(A + b'["x", "q"]\n', 2, "JSON object", id="not-an-object"),
    pytest.param(A + b'{"id": "x", "question": "caf\xe9"}\n', 2, "not UTF-8 text (byte 29)", id="latin-1"),
    pytest.param('{"id": "a", "question": "q"}\n'.encode("utf-16"), 1, "not UTF-8", id="utf-16-file"),
    pytest.param(A + b"\x00\xff" * 64, 2, "not UTF-8", id="binary-tail"),
    pytest.param(A + b'{"id": "x", "question": "\\ud800"}\n', 2, "lone surrogate", id="lone-surrogate"),
    pytest.param(A + b'{"id": "x", "question": "a\x00b"}\n', 2, "Invalid control character", id="raw-nul"),
    pytest.param(A + b"[" * 100_000 + b"\n", 2, "nested too deeply", id="nested-too-deeply"),
    pytest.param(A + b'{"id": "x", "question": "' + b"q" * MAX_TASK_LINE_BYTES + b'"}\n', 2,
                 f"longer than {MAX_TASK_LINE_BYTES} bytes", id="oversized-line"),
    pytest.param(b"", 1, "no tasks", id="empty-file"),
    pytest.param(b"\n  \n\n", 1, "no tasks", id="blank-lines-only"),
]  # fmt: skip


class TestMalformedTaskFile:
    @pytest.mark.parametrize(("content", "line", "problem"), TASK_FILES)
    def test_reader_names_the_line(self, tmp_path: Path, content: bytes, line: int, problem: str) -> None:
        path = tmp_path / "tasks.jsonl"
        path.write_bytes(content)
        with pytest.raises(TaskFormatError) as info:
            load_tasks(path)
        assert info.value.line == line and info.value.path == str(path)
        assert str(info.value).startswith(f"{path}:{line}: ") and problem in str(info.value)

    @pytest.mark.parametrize(("content", "line", "problem"), TASK_FILES)
    def test_cli_exits_2_with_one_line(self, tmp_path: Path, content: bytes, line: int, problem: str) -> None:
        path = tmp_path / "tasks.jsonl"
        path.write_bytes(content)
        out = tmp_path / "results.jsonl"
        result = runner.invoke(app, ["batch", str(path), "--out", str(out), "--graph", GRAPH])
        error = _one_error_line(result)
        assert error.startswith(f"error: {path}:{line}: ") and problem in error
        assert not out.exists()  # refused before anything was opened for writing

    def test_a_question_just_under_the_line_limit_runs(self, tmp_path: Path) -> None:
        # The limit refuses oversized lines only: a line one byte shorter is an ordinary task.
        head = b'{"id": "big", "question": "add 20 22 '
        tail = b'"}\n'
        line = head + b"x" * (MAX_TASK_LINE_BYTES - len(head) - len(tail)) + tail
        assert len(line) == MAX_TASK_LINE_BYTES
        path = tmp_path / "tasks.jsonl"
        path.write_bytes(line)
        out = tmp_path / "results.jsonl"
        result = runner.invoke(app, ["batch", str(path), "--out", str(out), "--graph", GRAPH, "--json"])
        assert result.exit_code == 0, result.output
        [done] = read_results(out).results
        assert done["id"] == "big" and done["status"] == "accepted" and done["answer"] == "42"

    @pytest.mark.parametrize(
        ("make", "problem"),
        [
            pytest.param(lambda d: d, ": is a directory; give a file's path", id="tasks-is-a-directory"),
            pytest.param(lambda d: d / "missing.jsonl", "missing.jsonl: no such file", id="tasks-missing"),
        ],
    )
    def test_unreadable_task_file_is_one_line(
        self, tmp_path: Path, make: Callable[[Path], Path], problem: str
    ) -> None:
        result = runner.invoke(app, ["batch", str(make(tmp_path)), "--out", str(tmp_path / "r.jsonl")])
        assert problem in _one_error_line(result)

    def test_out_that_is_a_directory_is_one_line(self, tmp_path: Path) -> None:
        tasks = tmp_path / "tasks.jsonl"
        tasks.write_bytes(A)
        result = runner.invoke(app, ["batch", str(tasks), "--out", str(tmp_path), "--resume"])
        assert f"--out {tmp_path}: is a directory" in _one_error_line(result)

    def test_real_process_prints_no_traceback(self, tmp_path: Path) -> None:
        # The installed entry point in a separate process: what a user's shell sees.
        path = tmp_path / "tasks.jsonl"
        path.write_bytes(A + b'{"id": "b", "question": "caf\xe9"}\n')
        proc = subprocess.run(
            [sys.executable, "-c", "from retryctl.cli import main; main()", "batch", str(path),
             "--out", str(tmp_path / "r.jsonl")],
            capture_output=True, text=True, cwd=ROOT, timeout=60, check=False,
        )  # fmt: skip
        assert proc.returncode == 2
        assert proc.stderr == f"error: {path}:2: not UTF-8 text (byte 29)\n"


# -- nothing already written is lost (batch) -------------------------------------------------------

DONE = b'{"answer": "2", "id": "a", "status": "accepted", "tries": 1}\n'
DONE_B = b'{"answer": "4", "id": "b", "status": "accepted", "tries": 1}\n'
C = b'{"id": "c", "question": "add 3 3"}\n'

RESUMES: list[Any] = [
    pytest.param(A + B + b'{"id": "x", question}\n' + C, DONE + DONE_B, "tasks.jsonl:3: not JSON",
                 id="bad-task-line-in-the-middle"),
    pytest.param(A + B + b'{"id": "c", "question": "caf\xe9"}\n', DONE + DONE_B, "tasks.jsonl:3: not UTF-8",
                 id="non-utf8-task-line"),
    pytest.param(A + B + C, DONE + b"garbage\n" + DONE_B, "cannot resume: ", id="garbage-result-line-2"),
    pytest.param(A + B + C, b"\xff\xfe" + DONE + DONE_B, "results.jsonl:1: not a result line",
                 id="non-utf8-result-line-1"),
    pytest.param(A + B + C, DONE + b"[" * 100_000 + b"\n" + DONE_B, "results.jsonl:2: not a result line",
                 id="nested-result-line-2"),
    pytest.param(A + B + C, DONE + b'["a"]\n' + DONE_B, "results.jsonl:2: not a result line",
                 id="result-line-not-an-object"),
]  # fmt: skip


class TestNothingWrittenIsLost:
    @pytest.mark.parametrize(("tasks", "results", "problem"), RESUMES)
    def test_resume_refuses_and_keeps_the_results_file(
        self, tmp_path: Path, tasks: bytes, results: bytes, problem: str
    ) -> None:
        (tmp_path / "tasks.jsonl").write_bytes(tasks)
        out = tmp_path / "results.jsonl"
        out.write_bytes(results)
        result = runner.invoke(
            app, ["batch", str(tmp_path / "tasks.jsonl"), "--out", str(out), "--resume", "--graph", GRAPH]
        )
        assert problem in _one_error_line(result)
        assert out.read_bytes() == results  # not cut, not rewritten, nothing appended

    def test_fixing_the_task_file_resumes_after_the_kept_results(self, tmp_path: Path) -> None:
        tasks, out = tmp_path / "tasks.jsonl", tmp_path / "results.jsonl"
        tasks.write_bytes(A + B)
        args = ["batch", str(tasks), "--out", str(out), "--graph", GRAPH, "--retry-wait", "0"]
        assert runner.invoke(app, args).exit_code == 0
        finished = out.read_bytes()
        d = b'{"id": "d", "question": "add 4 4"}\n'
        tasks.write_bytes(A + B + b'{"id": "c", "question": add 3 3}\n' + d)
        assert "tasks.jsonl:3:" in _one_error_line(runner.invoke(app, [*args, "--resume"]))
        assert out.read_bytes() == finished
        tasks.write_bytes(A + B + C + d)
        assert runner.invoke(app, [*args, "--resume"]).exit_code == 0
        after = out.read_bytes()
        assert after.startswith(finished)  # the earlier lines are the same bytes, in place
        answers = {r["id"]: r["answer"] for r in read_results(out).results}
        assert answers == {"a": "2", "b": "4", "c": "6", "d": "8"}


# -- malformed banks -------------------------------------------------------------------------------

Q1 = b'{"id": 1, "question": "q", "gold": "a", "samples": [{"text": "a", "answer": "a"}]}\n'
Q2 = b'{"id": 2, "question": "q", "gold": "b", "samples": [{"text": "b", "token_logprobs": [-0.1]}]}\n'
SMALL_BANK_LIMIT = 4096
"""The bank line limit is 64 MiB; the table lowers it so that an oversized line stays cheap to write."""


def _q(**fields: object) -> bytes:
    base: dict[str, object] = {"id": 9, "question": "q", "gold": "a", "samples": [{"text": "a"}]}
    return json.dumps({**base, **fields}).encode() + b"\n"


BANKS: list[Any] = [
    pytest.param(Q1 + b'{"id": 2,\n', 2, "invalid JSON", id="bad-json"),
    pytest.param(Q1 + Q2 + Q1, 3, "duplicate id '1'", id="duplicate-id"),
    pytest.param(Q1 + b'{"id": 2, "question": "q", "gold": "a"}\n', 2, "missing field 'samples'",
                 id="missing-samples"),
    pytest.param(Q1 + _q(samples=[]), 2, "'samples' is empty", id="empty-samples"),
    pytest.param(Q1 + _q(samples="a"), 2, "'samples' must be a list", id="samples-not-a-list"),
    pytest.param(Q1 + _q(samples=["a"]), 2, "samples[0] must be an object", id="sample-not-an-object"),
    pytest.param(Q1 + _q(samples=[{"text": 5}]), 2, "samples[0].text", id="sample-text-wrong-type"),
    pytest.param(Q1 + _q(samples=[{"text": "a"}, {"text": "b", "answer": [1]}]), 2, "samples[1].answer",
                 id="answer-wrong-type"),
    pytest.param(Q1 + _q(samples=[{"text": "a", "token_logprobs": [0.5]}]), 2, "token_logprobs",
                 id="logprob-positive"),
    pytest.param(Q1 + Q2.replace(b"-0.1", b"NaN"), 2, "token_logprobs", id="logprob-nan"),
    pytest.param(Q1 + Q2.replace(b'"gold": "b"', b'"gold": Infinity'), 2, "'gold'", id="gold-infinite"),
    pytest.param(Q1 + _q(id=True), 2, "'id'", id="id-bool"),
    pytest.param(Q1 + Q2.replace(b'"q"', b'"caf\xe9"'), 2, "not UTF-8 text", id="latin-1"),
    pytest.param(Q1.decode().encode("utf-16"), 1, "not UTF-8 text (byte 1)", id="utf-16-file"),
    pytest.param(Q1 + b"[" * 3000 + b"\n", 2, "nested too deeply", id="nested-too-deeply"),
    pytest.param(Q1 + _q(question="x" * SMALL_BANK_LIMIT), 2, f"longer than {SMALL_BANK_LIMIT} bytes",
                 id="oversized-line"),
    pytest.param(b"", 1, "no questions", id="empty-file"),
]  # fmt: skip


class TestMalformedBank:
    @pytest.fixture(autouse=True)
    def _small_limit(self, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setattr(retryctl.banks, "MAX_BANK_LINE_BYTES", SMALL_BANK_LIMIT)

    @pytest.mark.parametrize(("content", "line", "problem"), BANKS)
    def test_reader_names_the_line(self, tmp_path: Path, content: bytes, line: int, problem: str) -> None:
        path = tmp_path / "bank.jsonl"
        path.write_bytes(content)
        with pytest.raises(BankFormatError) as info:
            load_bank(path)
        assert info.value.line == line and str(info.value).startswith(f"{path}:{line}: ")
        assert problem in info.value.problem

    @pytest.mark.parametrize(("content", "line", "problem"), BANKS)
    def test_bench_exits_2_with_one_line(
        self, tmp_path: Path, content: bytes, line: int, problem: str
    ) -> None:
        path = tmp_path / "bank.jsonl"
        path.write_bytes(content)
        error = _one_error_line(runner.invoke(app, ["bench", str(path), "--orders", "1"]))
        assert f"{path}:{line}: " in error and problem in error


# -- malformed and non-UTF-8 decision logs given to `retryctl audit` -------------------------------


def _good_log(path: Path, records: int = 3) -> list[bytes]:
    with DecisionLog(path) as log:
        for attempt in range(records):
            log.record_verdict(make_verdict(), run_id="run-1", step_id="s", attempt=attempt,
                               candidates_summary={"12": 2}, latency_ms=3.5)  # fmt: skip
    return path.read_bytes().splitlines(keepends=True)


def _edit(lines: list[bytes], index: int, old: bytes, new: bytes) -> list[bytes]:
    assert old in lines[index]
    return [*lines[:index], lines[index].replace(old, new, 1), *lines[index + 1 :]]


LOGS: list[Any] = [
    pytest.param(lambda ls: _edit(ls, 1, b"below", b"b\xe9low"), 2, "not UTF-8 text", id="latin-1-byte-in-2"),
    pytest.param(lambda ls: [ls[0], b"\xff\xfe\xfd\n", *ls[1:]], 2, "not UTF-8 text (byte 1",
                 id="garbage-line-inserted"),
    pytest.param(lambda ls: [*ls, '{"schema": 1}\n'.encode("utf-16")], 4, "not UTF-8 text",
                 id="utf-16-line-appended"),
    pytest.param(lambda ls: _edit(ls, 2, b'"confidence":0.76', b'"confidence":NaN'), 3,
                 "non-finite number NaN", id="nan-in-record-3"),
    pytest.param(lambda ls: [*ls, b"[" * 100_000 + b"\n"], 4, "nested too deeply", id="nested-line-appended"),
    pytest.param(lambda ls: [*ls, b"[1, 2]\n"], 4, "not a JSON object", id="array-line-appended"),
    pytest.param(lambda ls: [*ls, b'{"schema":1,"ki'], 4, "torn tail", id="torn-last-line"),
]  # fmt: skip


class TestMalformedDecisionLog:
    @pytest.mark.parametrize(("damage", "line", "problem"), LOGS)
    def test_verify_names_the_line_and_keeps_the_records_before(
        self, tmp_path: Path, damage: Callable[[list[bytes]], list[bytes]], line: int, problem: str
    ) -> None:
        path = tmp_path / "log.jsonl"
        path.write_bytes(b"".join(damage(_good_log(path))))
        report = verify_log(path)
        assert not report.ok and report.error is not None
        assert report.error.line == line and report.records == line - 1 and problem in report.error.problem
        with pytest.raises(LogIntegrityError) as info:
            list(read_records(path))
        assert info.value.line == line

    @pytest.mark.parametrize(("damage", "line", "problem"), LOGS)
    def test_audit_cli_reports_the_line_without_a_traceback(
        self, tmp_path: Path, damage: Callable[[list[bytes]], list[bytes]], line: int, problem: str
    ) -> None:
        path = tmp_path / "log.jsonl"
        path.write_bytes(b"".join(damage(_good_log(path))))
        result = runner.invoke(app, ["audit", "--json", str(path)])
        assert result.exit_code == 1 and isinstance(result.exception, SystemExit), result.output
        out = json.loads(result.stdout)
        [verification] = out["verification"]
        assert verification["error"]["line"] == line and problem in verification["error"]["problem"]
        # The readable part is still analysed, and the unreadable line is named, not hidden.
        assert f"{path}:{line}" in out["summary"]["overview"]["undecodable_lines"]


# -- a decision log handed an invalid record: clear error, nothing written, chain intact ----------


def _verdict(log: DecisionLog, **overrides: Any) -> object:
    kwargs: dict[str, Any] = {"run_id": "run-1", "step_id": "s", "attempt": 9, "candidates_summary": None,
                              "latency_ms": 1.0}  # fmt: skip
    verdict = make_verdict(**overrides.pop("verdict", {}))
    return log.record_verdict(verdict, **{**kwargs, **overrides})


def _summary(log: DecisionLog, **overrides: Any) -> object:
    kwargs: dict[str, Any] = {"run_id": "run-1", "step_id": "s", "final_answer": "12", "sampling_history": [],
                              "budget_used": {"samples": 3}, "budget_max": {"samples": 8}}  # fmt: skip
    return log.record_summary(**{**kwargs, **overrides})


def _add(key: str, value: object) -> Any:
    return lambda _logger, _name, event: {**event, key: value}


Record = Callable[[DecisionLog], object]

BAD_RECORDS: list[Any] = [
    pytest.param((), lambda log: _verdict(log, latency_ms=NAN), pydantic.ValidationError, "latency_ms",
                 id="latency-nan"),
    pytest.param((), lambda log: _verdict(log, verdict={"confidence": INF}), pydantic.ValidationError,
                 "confidence", id="confidence-inf"),
    pytest.param((), lambda log: _verdict(log, extra={"score": NAN}), pydantic.ValidationError, "extra.score",
                 id="extra-nan"),
    pytest.param((), lambda log: _verdict(log, extra={"obj": object()}), pydantic.ValidationError,
                 "extra.obj", id="extra-not-json"),
    pytest.param((), lambda log: _verdict(log, candidates_summary={1, 2}), pydantic.ValidationError,
                 "candidates_summary", id="candidates-a-set"),
    pytest.param((), lambda log: _verdict(log, run_id=""), pydantic.ValidationError, "run_id",
                 id="empty-run-id"),
    pytest.param((), lambda log: _verdict(log, attempt=-1), pydantic.ValidationError, "attempt",
                 id="negative-attempt"),
    pytest.param((), lambda log: _verdict(log, verdict={"reason": "bad \ud800 text"}), ConfigError, "reason",
                 id="reason-lone-surrogate"),
    pytest.param((), lambda log: _verdict(log, verdict={"answer": "\udcff"}), ConfigError, "answer",
                 id="answer-lone-surrogate"),
    pytest.param((), lambda log: _summary(log, budget_used={"samples": NAN}), pydantic.ValidationError,
                 "budget_used.samples", id="summary-budget-nan"),
    pytest.param((), lambda log: _summary(log, sampling_history=[b"\xff"]), pydantic.ValidationError,
                 "sampling_history", id="summary-history-bytes"),
    pytest.param((_add("host", object()),), _verdict, pydantic.ValidationError, "host",
                 id="processor-adds-an-object"),
    pytest.param((_add("load", NAN),), _verdict, pydantic.ValidationError, "load", id="processor-adds-nan"),
    pytest.param((_add("prev_hash", "0" * 64),), _verdict, ValueError,
                 "'prev_hash' and 'hash' are set by the sink", id="processor-sets-chain-field"),
]  # fmt: skip


class TestInvalidRecord:
    @pytest.mark.parametrize(("processors", "record", "error", "field"), BAD_RECORDS)
    def test_refused_and_the_log_still_verifies(
        self, tmp_path: Path, processors: tuple[Any, ...], record: Record, error: type[Exception], field: str
    ) -> None:
        path = tmp_path / "log.jsonl"
        _good_log(path, records=2)
        before = path.read_bytes()
        with DecisionLog(path, processors=processors) as log:
            head = log.head
            with pytest.raises(error) as info:
                record(log)
            assert field in str(info.value)
            assert path.read_bytes() == before and log.head == head  # nothing written, chain head unmoved
        # A later writer continues the same chain: every earlier record is still there and verifies.
        with DecisionLog(path) as log:
            _verdict(log)
        report = verify_log(path)
        assert report.ok and report.records == 3, report.error
        assert path.read_bytes().startswith(before)


# -- oversized inputs: a clear error or the documented bounded truncation --------------------------


class TestOversized:
    @pytest.mark.parametrize(
        ("expression", "problem"),
        [
            pytest.param("1+" * (MAX_EXPRESSION_CHARS // 2) + "1", f"longer than {MAX_EXPRESSION_CHARS}",
                         id="expression-too-long"),
            pytest.param("-" * 1998 + "1", "nested too deeply", id="expression-too-deep"),
            pytest.param("(" * 600 + "1" + ")" * 600, "syntax error near '(' at column 201",
                         id="too-many-parentheses"),
            pytest.param("2 ** 10 ** 9", "more than 100000 bits", id="result-too-big"),
            pytest.param("9" * 1999, "", id="longest-allowed-number"),
        ],
    )  # fmt: skip
    def test_calculator_tool_args(self, expression: str, problem: str) -> None:
        if not problem:  # at the limit: computed exactly, no error
            assert calculate(expression) == int(expression)
            return
        with pytest.raises(CalculatorError, match=re.escape(problem)):
            calculate(expression)
        # Through the tool the model gets the same message back as text, to fix its call.
        assert problem in CalculatorTool().invoke({"expression": expression})

    def test_python_tool_output_is_truncated_and_flagged(self) -> None:
        try:
            detect_tier()
        except SandboxUnavailable as exc:  # only where the probe says no isolating tier can run
            pytest.skip(str(exc))
        tool = PythonTool(timeout_s=20.0)
        code = "import sys\nsys.stdout.write('x' * 3_000_000)\nprint('END', file=sys.stderr)"
        report = tool.run_report(code)
        cap = SandboxLimits().max_output_bytes
        assert report.result.stdout_truncated and len(report.result.stdout) == cap
        assert report.result.stderr.strip() == "END" and not report.result.stderr_truncated
        text = tool.invoke({"code": "print('y' * 3_000_000)"})
        # What the model reads is bounded too, and says it was cut.
        assert len(text) < 4200 and text.endswith("... [cut] [truncated]")

    def test_huge_question_to_the_embedded_model_stops_with_the_reason(self) -> None:
        pytest.importorskip("llama_cpp", reason="needs the 'local' extra")
        backend = EmbeddedBackend(n_ctx=256, n_threads=1)
        try:
            step = ControlledStep(backend, policy=Policy(max_samples=2), interactive=False).compile()
            state = step.invoke({"messages": [HumanMessage("word " * 5000)]})
        finally:
            backend.close()
        result = state["result"]
        assert result["status"] == "stopped" and result["answer"] is None
        assert "fills the context of 256" in result["reason"] and "prompt of" in result["reason"]
