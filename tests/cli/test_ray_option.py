"""``--ray ADDRESS`` on ``batch``, ``eval`` and ``record``: refused before any work where it cannot work
(a missing extra, a local checkpoint file), and offered by all three commands. A real cluster run:
``tests/batch/test_ray.py``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from retryctl import _extras
from retryctl.cli import app

runner = CliRunner()


def _tasks(path: Path) -> Path:
    path.write_text(json.dumps({"id": "a", "question": "add 1 2", "gold": "3"}) + "\n")
    return path


class TestRayOption:
    def test_a_local_checkpoint_file_is_refused_before_anything_is_written(self, tmp_path: Path) -> None:
        out = tmp_path / "r.jsonl"
        args = [
            "batch",
            str(_tasks(tmp_path / "t.jsonl")),
            "--out",
            str(out),
            "--graph",
            "tests.batch._graphs:build",
        ]
        result = runner.invoke(app, [*args, "--checkpoints", str(tmp_path / "c.sqlite"), "--ray", "local"])
        assert result.exit_code == 2, result.output
        assert "--checkpoints cannot be used with --ray" in result.output
        assert not out.exists()

    @pytest.mark.parametrize("command", ["batch", "eval", "record"])
    def test_a_missing_extra_is_named_before_any_task_runs(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, command: str
    ) -> None:
        monkeypatch.setitem(_extras.EXTRAS, "ray", ("retryctl_no_such_ray",))
        out = tmp_path / ("out" if command == "eval" else "r.jsonl")
        args = [command, str(_tasks(tmp_path / "t.jsonl")), "--out", str(out), "--ray", "local"]
        if command == "batch":
            args += ["--graph", "tests.batch._graphs:build"]
        else:  # the model is not built before the check: any server will do, none is called
            args += ["--base-url", "http://127.0.0.1:9", "--model-name", "m"]
        result = runner.invoke(app, args)
        assert result.exit_code == 2, result.output
        assert f"retryctl {command} --ray needs the 'ray' extra" in result.output
        assert not (tmp_path / "r.jsonl").exists() or (tmp_path / "r.jsonl").stat().st_size == 0
