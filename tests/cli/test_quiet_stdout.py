"""``stdout_to_stderr``: what another thread prints while a run goes (as Ray's driver prints its
cluster's errors) lands on stderr, and stdout keeps the command's result alone."""

from __future__ import annotations

import asyncio
import threading

import pytest

from retryctl.cli._quiet_stdout import run_quietly, stdout_to_stderr


def _print_from_a_thread(text: str) -> None:
    thread = threading.Thread(target=print, args=(text,))
    thread.start()
    thread.join()


def test_a_thread_printing_during_the_run_goes_to_stderr(capsys: pytest.CaptureFixture[str]) -> None:
    with stdout_to_stderr(True):
        _print_from_a_thread("(raylet) a worker died; retrying the task")
    print('{"tasks": 3}')
    captured = capsys.readouterr()
    assert captured.out == '{"tasks": 3}\n'
    assert "a worker died" in captured.err


def test_when_not_enabled_stdout_is_left_alone(capsys: pytest.CaptureFixture[str]) -> None:
    with stdout_to_stderr(False):
        _print_from_a_thread("progress")
    assert capsys.readouterr().out == "progress\n"


def test_run_quietly_returns_the_result_and_keeps_stdout_clean(capsys: pytest.CaptureFixture[str]) -> None:
    async def run() -> int:
        await asyncio.to_thread(print, "(raylet) task retried")
        return 7

    assert run_quietly(run(), quiet=True) == 7
    captured = capsys.readouterr()
    assert captured.out == ""
    assert "task retried" in captured.err
