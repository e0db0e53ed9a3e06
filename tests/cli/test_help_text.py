"""Help that reads as the docs do at a terminal's 80 columns (issue 29, item 5): ``audit --diff A B``,
``calibrate``'s files once, and no default cut to an ellipsis."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from retryctl.cli import _COMMANDS, app

runner = CliRunner()


def _help(*command: str) -> str:
    done = runner.invoke(app, [*command, "--help"], env={"COLUMNS": "80", "TERM": "dumb"})
    assert done.exit_code == 0, done.output
    return done.output


def test_audit_diff_takes_a_and_b() -> None:
    text = _help("audit")
    assert "--diff" in text and "A B" in text and "<str,str>" not in text


def test_calibrate_names_its_files_once() -> None:
    usage = next(line for line in _help("calibrate").splitlines() if "Usage:" in line)
    assert "RESULTS.jsonl" in usage and "RESULTS.jsonl..." not in usage


def test_batch_says_its_default_graph_whole() -> None:
    text = " ".join(line.strip("│ ") for line in _help("batch").splitlines())
    assert "Default: the demo agent (module retryctl.agent, attr build_demo_graph)." in " ".join(text.split())


@pytest.mark.parametrize("command", sorted(_COMMANDS))
def test_nothing_is_cut_to_an_ellipsis_at_80_columns(command: str) -> None:
    assert "…" not in _help(command)
