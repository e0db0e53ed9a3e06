"""A command that needs an extra which is not installed: one ``problem:`` line naming it, exit 2, no
traceback, nothing written. And the offline demo runs on the core and the ``local`` extra alone, which is
what ``make demo`` installs.

Each command runs as ``retryctl`` does (:func:`retryctl.cli.main`) in a fresh interpreter whose import
hook refuses the extra's packages (``tests/test_extras.py``).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from retryctl.audit import verify_log
from tests.models.conftest import needs_llama
from tests.test_extras import run_python

SERVER = "http://127.0.0.1:9/v1"
TASKS = [{"id": "add", "question": "Tom has 4 apples. He gets 3 more. How many apples?", "gold": 7}]


def retryctl(args: list[str], *, refused: tuple[str, ...], cwd: Path, timeout: float = 120):
    """``retryctl ARGS`` with ``refused`` packages uninstallable."""
    code = f"import sys\nsys.argv = ['retryctl', *{args!r}]\nfrom retryctl.cli import main\nmain()\n"
    return run_python(code, refused=refused, cwd=cwd, timeout=timeout)


def problem(command: str, extra: str) -> str:
    return f"problem: {command} needs the {extra!r} extra: pip install 'retryctl[{extra}]'\n"


class TestMissingExtra:
    @pytest.mark.parametrize("refused", ["starlette", "uvicorn", "aiohttp", "openai"])
    def test_serve_without_the_gateway(self, refused: str, tmp_path: Path) -> None:
        done = retryctl(["serve", "--port", "0"], refused=(refused,), cwd=tmp_path)
        assert (done.returncode, done.stderr, done.stdout) == (2, problem("retryctl serve", "gateway"), "")

    def test_calibrate_without_scipy(self, tmp_path: Path) -> None:
        results = tmp_path / "results.jsonl"
        results.write_text(json.dumps({"id": "a", "points": [{"fused": 0.9, "correct": True}]}) + "\n")
        out = tmp_path / "calibration.json"
        done = retryctl(["calibrate", str(results), "--out", str(out)], refused=("scipy",), cwd=tmp_path)
        assert (done.returncode, done.stderr) == (2, problem("retryctl calibrate", "calibration"))
        assert not out.exists()

    @pytest.mark.parametrize(
        ("command", "args"),
        [
            ("demo", ["--model-name", "m", "--log", "d.jsonl"]),
            ("batch", ["tasks.jsonl", "--out", "r.jsonl", "--model-name", "m"]),
            ("eval", ["tasks.jsonl", "--out", "run", "--model-name", "m", "--calibration", "none"]),
            ("record", ["tasks.jsonl", "--out", "bank.jsonl", "--model-name", "m"]),
            ("sweep", ["tasks.jsonl", "--out", "sweep", "--temperature", "0.2", "--model-name", "m"]),
        ],
    )
    def test_a_server_without_the_openai_client(self, command: str, args: list[str], tmp_path: Path) -> None:
        (tmp_path / "tasks.jsonl").write_text("".join(json.dumps(t) + "\n" for t in TASKS))
        done = retryctl([command, *args, "--base-url", SERVER], refused=("openai",), cwd=tmp_path)
        assert (done.returncode, done.stderr) == (2, problem(f"retryctl {command} --base-url", "openai"))
        assert {p.name for p in tmp_path.iterdir()} - {"sweep"} == {"tasks.jsonl"}  # nothing else written


@needs_llama
class TestDemoOnTheLocalExtra:
    def test_the_offline_demo_needs_nothing_beyond_the_core_and_local(self, tmp_path: Path) -> None:
        not_in_core_or_local = ("openai", "scipy", "aiohttp", "starlette", "uvicorn", "httptools", "redis")
        log = tmp_path / "demo.jsonl"
        args = ["demo", "--threads", "1", "--log", str(log)]
        done = retryctl(args, refused=not_in_core_or_local, cwd=tmp_path, timeout=240)
        assert "Traceback" not in done.stdout + done.stderr
        assert done.returncode in (0, 4), done.stdout + done.stderr  # accepted, or an honest abstention
        assert verify_log(log).ok
