"""``retryctl audit``'s output, byte for byte, pinned on logs made here from fixed seeds.

The logs are laid down by ``bench/audit_million.py``'s generator (the writer's own line encoder, fixed
timestamps, seeded choices), so the same seed gives the same bytes on every machine; a few are then
damaged on purpose (a record edited with its hash left as it was, a torn tail, a record of the wrong
type, lines in the sorted layout another tool writes). One log is larger than
:data:`retryctl.report.PARALLEL_MIN_BYTES`, so that the command takes its two-process path, and is
damaged in its second half too. The command runs in a new process as a user runs it (``main``, its
hard exit included) and everything it writes, stdout, stderr, the exit code and the ``--html`` file,
is compared with the files under ``tests/report/golden/``, which this test wrote from the code as it
was before the report package was reorganised (the generator's record templates are frozen there
too, ``templates.json``). To write them again after a deliberate change of the
output: ``RETRYCTL_WRITE_GOLDEN=1 pytest tests/report/test_golden.py``, then read the diff.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from retryctl.audit._canonical import canonical_bytes, encode_line
from retryctl.audit._records import record_problem
from retryctl.report import PARALLEL_MIN_BYTES

ROOT = Path(__file__).resolve().parents[2]
GOLDEN = Path(__file__).parent / "golden"
WRITE = os.environ.get("RETRYCTL_WRITE_GOLDEN") == "1"
BIG_RECORDS = 80_000
"""Enough records (about 68 MB) to pass PARALLEL_MIN_BYTES: the two-process path."""

CASES: dict[str, list[str]] = {
    "small_text": ["small.jsonl"],
    "small_json": ["small.jsonl", "--json"],
    "small_html": ["small.jsonl", "--html", "report.html"],
    "small_why": ["small.jsonl", "--why", "run-3"],
    "small_why_json": ["small.jsonl", "--why", "run-3", "--json"],
    "small_diff_runs": ["small.jsonl", "--diff", "run-1", "run-4", "--json"],
    "diff_logs": ["--diff", "small.jsonl", "other.jsonl"],
    "diff_logs_json": ["--diff", "small.jsonl", "other.jsonl", "--json"],
    "two_logs_json": ["small.jsonl", "other.jsonl", "--json"],
    "mixed_text": ["mixed.jsonl"],
    "mixed_json": ["mixed.jsonl", "--json"],
    "mixed_html": ["mixed.jsonl", "--html", "report.html"],
    "edited_json": ["edited.jsonl", "--json"],
    "edited_text": ["edited.jsonl"],
    "torn_json": ["torn.jsonl", "--json"],
    "invalid_json": ["invalid.jsonl", "--json"],
    "big_text": ["big.jsonl"],
    "big_json": ["big.jsonl", "--json"],
    "big_html": ["big.jsonl", "--html", "report.html", "--json"],
    "big_why": ["big.jsonl", "--why", "run-1000"],
    "big_diff_runs": ["big.jsonl", "--diff", "run-10", "run-1000"],
    "big_edited_json": ["big_edited.jsonl", "--json"],
    "big_edited_html": ["big_edited.jsonl", "--html", "report.html", "--json"],
    "big_torn_json": ["big_torn.jsonl", "--json"],
    "big_sorted_json": ["big_sorted.jsonl", "--json"],
}


def _generator() -> ModuleType:
    """``bench/audit_million.py`` (bench/ is scripts, not a package), for its :func:`write_log`, with
    its record templates frozen (``golden/templates.json``, what they were when the output was
    pinned): the logs stay the same bytes when the record models change, and so must the output."""
    spec = importlib.util.spec_from_file_location("_bench_audit_million", ROOT / "bench" / "audit_million.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    frozen = json.loads((GOLDEN / "templates.json").read_text(encoding="utf-8"))
    # Replaced on this module object only (it is not the one in sys.modules): write_log calls them.
    setattr(module, "_verdict_template", lambda action: dict(frozen["verdict"][action]))  # noqa: B010
    setattr(module, "_summary_template", lambda: dict(frozen["summary"]))  # noqa: B010
    return module


def _head(lines: list[bytes]) -> str:
    head = json.loads(lines[-1])["hash"]
    assert isinstance(head, str)
    return head


def _chain(bodies: list[dict[str, Any]], head: str) -> list[bytes]:
    """``bodies`` as chained lines after ``head``, each checked against the record models first."""
    lines = []
    for body in bodies:
        assert record_problem({**body, "prev_hash": head, "hash": "0" * 64}) is None, body
        line, head = encode_line({**body, "prev_hash": head})
        lines.append(line)
    return lines


def _varied(gen: ModuleType) -> list[dict[str, Any]]:
    """Verdicts and summaries of shapes the generator does not write: tool calls, per-token data,
    error classes, a wrong answer against its gold, a reason naming a budget."""
    bodies: list[dict[str, Any]] = []
    for i in range(12):
        action = ("retry", "refine", "accept", "stop")[i % 4]
        body = dict(gen._verdict_template(action))
        body.update(
            run_id=f"tool-run-{i % 3}",
            step_id=f"call-{i // 3}",
            attempt=1 + i % 4,
            confidence=0.83 + i / 1000,
            target="calculator" if i % 2 else "gpt-4o",
            error_class="rate_limit" if i % 5 == 0 else None,
            candidates_summary={"tool": "calculator", "n": i} if i % 2 else {"n": 3},
            extra={"gold": "12" if i % 3 else "13", "token_entropy": [0.1 * i, 0.5, 1.25]},
            answer="12",
            reason=f"step 'call-{i // 3}' budget 'usd' is spent ({i} of 9)" if action == "stop" else "ok",
            budget={
                "used": {"samples": 2.0 + i, "usd": 0.001 * (i + 1), "attempts": 1},
                "limit": {"samples": 40.0, "usd": 1.0, "attempts": None},
            },
        )
        bodies.append(body)
    summary = dict(gen._summary_template())
    summary.update(
        run_id="tool-run-1",
        step_id="call-1",
        final_answer="13",
        extra={"gold": "13", "token_logprobs": [-0.1, -0.9]},
        sampling_history=[{"answer": "13", "token_logprobs": [-0.2, -1.5]}, 3],
    )
    bodies.append(summary)
    return bodies


def _sorted_layout(line: bytes) -> bytes:
    """The line as another tool writes it: canonical JSON of the whole record, ``hash`` in its place."""
    return canonical_bytes(json.loads(line)) + b"\n"


def _edit(line: bytes) -> bytes:
    """The record with its action changed and its hash left: a naive edit the chain must catch."""
    record = json.loads(line)
    record["action"] = "stop" if record.get("action") != "stop" else "accept"
    return canonical_bytes(record) + b"\n"


@pytest.fixture(scope="module")
def logs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    gen = _generator()
    d = tmp_path_factory.mktemp("golden")
    gen.write_log(str(d / "small.jsonl"), 3_000, seed=7)
    gen.write_log(str(d / "other.jsonl"), 2_000, seed=8)
    small = (d / "small.jsonl").read_bytes().splitlines(keepends=True)
    # Valid throughout: varied records, and every fifth line in the sorted layout (the exact walk).
    extra = _chain(_varied(gen), _head(small))
    mixed = [_sorted_layout(x) if i % 5 == 2 else x for i, x in enumerate(small + extra)]
    (d / "mixed.jsonl").write_bytes(b"".join(mixed))
    edited = list(small)
    edited[1_234] = _edit(edited[1_234])
    (d / "edited.jsonl").write_bytes(b"".join(edited))
    (d / "torn.jsonl").write_bytes(b"".join(small) + small[10][:70])
    # A chain that verifies, with a record whose field has the wrong type: the usage error (exit 2).
    wrong = dict(gen._verdict_template("retry"), run_id="odd", step_id="q", attempt="one")
    line, _ = encode_line({**wrong, "prev_hash": _head(small)})
    (d / "invalid.jsonl").write_bytes(b"".join(small) + line)
    big = d / "big.jsonl"
    gen.write_log(str(big), BIG_RECORDS, seed=11)
    assert big.stat().st_size >= PARALLEL_MIN_BYTES
    raw = big.read_bytes()
    lines = raw.splitlines(keepends=True)
    at = int(len(lines) * 0.8)  # in the second process's part
    (d / "big_edited.jsonl").write_bytes(b"".join([*lines[:at], _edit(lines[at]), *lines[at + 1 :]]))
    (d / "big_torn.jsonl").write_bytes(raw + lines[5][:100])
    sorted_lines = [_sorted_layout(x) if i % 1_000 in (0, 1) else x for i, x in enumerate(lines)]
    (d / "big_sorted.jsonl").write_bytes(b"".join(sorted_lines))
    return d


def _run(logs: Path, args: list[str]) -> str:
    """What the command wrote, as one text: exit code, stdout, stderr and the HTML file if any."""
    html = logs / "report.html"
    html.unlink(missing_ok=True)
    env = {k: v for k, v in os.environ.items() if k not in ("FORCE_COLOR", "NO_COLOR", "TTY_COMPATIBLE")}
    env.update(COLUMNS="120", LINES="50", TERM="dumb", PYTHONPATH=str(ROOT))
    done = subprocess.run(
        [sys.executable, "-m", "retryctl.cli", "audit", *args],
        cwd=logs,
        env=env,
        capture_output=True,
        check=False,
    )
    parts = [f"exit {done.returncode}\n", "--- stdout\n", done.stdout.decode(), "--- stderr\n"]
    parts.append(done.stderr.decode())
    if html.exists():
        parts += ["--- html\n", html.read_text(encoding="utf-8")]
    return "".join(parts)


class TestAuditOutput:
    @pytest.mark.parametrize("case", list(CASES))
    def test_the_output_is_the_pinned_one(self, logs: Path, case: str) -> None:
        got = _run(logs, CASES[case])
        path = GOLDEN / f"{case}.txt"
        if WRITE:
            GOLDEN.mkdir(exist_ok=True)
            path.write_text(got, encoding="utf-8")
        assert path.exists(), f"no pinned output for {case}: write it with RETRYCTL_WRITE_GOLDEN=1"
        want = path.read_text(encoding="utf-8")
        assert got == want, f"retryctl audit {' '.join(CASES[case])}: the output changed"

    def test_the_cases_cover_every_exit_code_and_both_paths(self) -> None:
        # Guards the pins against passing vacuously: each kind of ending is among them.
        codes = {path.read_text(encoding="utf-8").split("\n", 1)[0] for path in GOLDEN.glob("*.txt")}
        assert codes == {"exit 0", "exit 1", "exit 2"}
        assert any(args[0].startswith("big") for args in CASES.values())
        assert sorted(p.stem for p in GOLDEN.glob("*.txt")) == sorted(CASES)
        assert (GOLDEN / "templates.json").exists()
