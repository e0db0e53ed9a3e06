"""demo, batch and doctor on a llama.cpp build that dies natively: one ``problem:`` line, a documented code.

The crashing build is a real package named ``llama_cpp`` first on ``PYTHONPATH`` whose ``Llama`` kills its
process with SIGILL, as a build with AMX does on a VM that reports AMX but cannot execute it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.models.conftest import needs_llama

RETRYCTL = Path(sys.executable).parent / "retryctl"
_CRASHING_LLAMA = """
import os, signal

class Llama:
    def __init__(self, *args, **kwargs):
        os.kill(os.getpid(), signal.SIGILL)
"""


@pytest.fixture
def crashing_env(tmp_path: Path) -> dict[str, str]:
    package = tmp_path / "site" / "llama_cpp"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text(_CRASHING_LLAMA)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(tmp_path / "site"), env.get("PYTHONPATH")) if p)
    env["XDG_CACHE_HOME"] = str(tmp_path / "cache")
    return env


def _run(args: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(RETRYCTL), *args],
        cwd=cwd, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=180, check=False,
    )  # fmt: skip


def _problem_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith("problem:")]


@needs_llama
class TestCrashingBuild:
    def test_demo_exits_2_with_one_problem_line_naming_the_signal(
        self, crashing_env: dict[str, str], tmp_path: Path
    ) -> None:
        proc = _run(["demo", "--log", str(tmp_path / "d.jsonl")], crashing_env, tmp_path)
        assert proc.returncode == 2, proc.stdout + proc.stderr
        assert "Traceback" not in proc.stdout + proc.stderr
        [line] = _problem_lines(proc.stderr)
        assert "SIGILL (illegal instruction)" in line and "CMAKE_ARGS=" in line
        assert not (tmp_path / "d.jsonl").exists()  # nothing was started, nothing written
        # Cached per build: the second run answers from the cache, the same way.
        again = _run(["demo", "--log", str(tmp_path / "d.jsonl")], crashing_env, tmp_path)
        assert again.returncode == 2 and _problem_lines(again.stderr) == [line]

    def test_batch_exits_2_before_any_task_runs(self, crashing_env: dict[str, str], tmp_path: Path) -> None:
        tasks = tmp_path / "tasks.jsonl"
        tasks.write_text(json.dumps({"id": 1, "question": "What is 2 + 3?", "gold": 5}) + "\n")
        out = tmp_path / "out.jsonl"
        proc = _run(["batch", str(tasks), "--out", str(out)], crashing_env, tmp_path)
        assert proc.returncode == 2, proc.stdout + proc.stderr
        assert "Traceback" not in proc.stdout + proc.stderr
        [line] = _problem_lines(proc.stderr)
        assert "SIGILL" in line
        assert not out.exists() or out.read_text() == ""

    def test_doctor_survives_and_names_the_problem(
        self, crashing_env: dict[str, str], tmp_path: Path
    ) -> None:
        proc = _run(["doctor"], crashing_env, tmp_path)
        assert proc.returncode == 1, proc.stdout + proc.stderr
        assert "Traceback" not in proc.stdout + proc.stderr
        [line] = _problem_lines(proc.stdout)
        assert "SIGILL (illegal instruction)" in line and "--no-cache-dir" in line
