"""``--ray ADDRESS`` on ``batch``, ``eval`` and ``record``: refused before any work where it cannot work
(a missing extra, a local checkpoint file), and offered by all three commands. A real cluster run:
``tests/batch/test_ray.py``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import typer
from typer.core import TyperGroup
from typer.testing import CliRunner

from retryctl import _extras
from retryctl.cli import app
from tests._ray_cluster import free_port

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

    def test_a_misspelt_graph_is_named_before_a_cluster_starts(self, tmp_path: Path) -> None:
        tasks = _tasks(tmp_path / "t.jsonl")
        args = [
            "batch",
            str(tasks),
            "--out",
            str(tmp_path / "r.jsonl"),
            "--graph",
            "tests.batch._graphs:nope",
        ]
        # Before a cluster is started for the run (an address is probed earlier still: see below).
        result = runner.invoke(app, [*args, "--ray", "local"])
        assert result.exit_code == 2, result.output
        assert "has no attribute 'nope'" in result.output

    @pytest.mark.parametrize("command", ["batch", "eval", "record"])
    @pytest.mark.parametrize("scheme", ["", "ray://"])
    def test_an_address_nobody_answers_at_exits_2_before_anything_is_written(
        self, tmp_path: Path, command: str, scheme: str
    ) -> None:
        out = tmp_path / ("out" if command == "eval" else "r.jsonl")
        address = f"{scheme}127.0.0.1:{free_port()}"
        args = [command, str(_tasks(tmp_path / "t.jsonl")), "--out", str(out), "--ray", address]
        if command == "batch":
            args += ["--graph", "tests.batch._graphs:build", "--log", str(tmp_path / "log.jsonl")]
        else:
            args += ["--base-url", "http://127.0.0.1:9", "--model-name", "m"]
        result = runner.invoke(app, args)
        assert result.exit_code == 2, result.output
        errors = [line for line in result.output.splitlines() if line.startswith("error:")]
        assert len(errors) == 1, result.output
        assert f"--ray={address!r}" in errors[0]
        assert "no Ray cluster answers at 127.0.0.1:" in errors[0]
        assert sorted(p.name for p in tmp_path.iterdir()) == ["t.jsonl"]


def _address(command: str, tmp_path: Path, *options: str) -> object:
    """What ``--ray`` parses to in ``retryctl COMMAND TASKS --out OUT *options`` (parsed as the command
    line parses it, nothing run)."""
    group = typer.main.get_command(app)
    assert isinstance(group, TyperGroup)
    args = [str(tmp_path / "t.jsonl"), "--out", str(tmp_path / "r.jsonl"), *options]
    with group.commands[command].make_context(command, args) as ctx:
        return ctx.params["ray"]


class TestRayAddress:
    @pytest.mark.parametrize("command", ["batch", "eval", "record"])
    def test_a_bare_ray_last_on_the_line_is_a_cluster_for_the_run(self, tmp_path: Path, command: str) -> None:
        assert _address(command, tmp_path, "--ray") == "local"

    def test_a_bare_ray_followed_by_an_option_is_a_cluster_for_the_run(self, tmp_path: Path) -> None:
        assert _address("batch", tmp_path, "--ray", "--concurrency", "2") == "local"
        assert _address("batch", tmp_path, "--ray", "--json") == "local"

    @pytest.mark.parametrize("address", ["auto", "127.0.0.1:6379", "ray://127.0.0.1:10001", "local"])
    def test_an_address_is_taken_as_given(self, tmp_path: Path, address: str) -> None:
        assert _address("batch", tmp_path, "--ray", address) == address
        assert _address("batch", tmp_path, f"--ray={address}", "--json") == address

    def test_without_ray_there_is_no_cluster(self, tmp_path: Path) -> None:
        assert _address("batch", tmp_path) is None

    def test_after_a_double_dash_ray_is_an_argument(self, tmp_path: Path) -> None:
        group = typer.main.get_command(app)
        assert isinstance(group, TyperGroup)
        args = ["--out", str(tmp_path / "r.jsonl"), "--", "--ray"]
        with group.commands["batch"].make_context("batch", args) as ctx:
            assert ctx.params["ray"] is None
            assert str(ctx.params["tasks_path"]) == "--ray"

    @pytest.mark.parametrize("address", ["tasks.jsonl", "127.0.0.1", "127.0.0.1:port", "host:70000", "a b:1"])
    def test_a_bad_address_is_named_before_a_cluster_starts(self, tmp_path: Path, address: str) -> None:
        out = tmp_path / "r.jsonl"
        tasks = str(_tasks(tmp_path / "t.jsonl"))
        args = ["batch", tasks, "--out", str(out), "--graph", "tests.batch._graphs:build"]
        result = runner.invoke(app, [*args, "--ray", address])
        assert result.exit_code == 2, result.output
        assert f"invalid --ray={address!r}" in result.output
        assert "give local, auto, HOST:PORT or ray://HOST:PORT" in result.output
        assert not out.exists() or out.stat().st_size == 0
