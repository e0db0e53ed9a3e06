"""Stdout kept for a command's result while its run goes (``batch --json``, ``eval``, ``record`` under
``--ray``).

Ray's driver prints its cluster's error messages (a task retried after its worker died, a worker's
traceback) to stdout from a thread of its own, in the middle of a run; a command whose stdout is its
result alone (JSON to pipe into ``jq``, one summary line) sends stdout to stderr while the run goes,
and prints its result after. ``sys.stdout`` is process-wide, so the redirection reaches Ray's thread.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Coroutine, Iterator
from contextlib import contextmanager, redirect_stdout
from typing import Any, TypeVar

__all__ = ["run_quietly", "stdout_to_stderr"]

T = TypeVar("T")


@contextmanager
def stdout_to_stderr(enabled: bool) -> Iterator[None]:
    """While inside, what is printed to stdout goes to stderr (when ``enabled``; else nothing changes)."""
    if not enabled:
        yield
        return
    with redirect_stdout(sys.stderr):
        yield


def run_quietly(main: Coroutine[Any, Any, T], *, quiet: bool) -> T:
    """``asyncio.run(main)``, with stdout sent to stderr while it runs when ``quiet``."""
    with stdout_to_stderr(quiet):
        return asyncio.run(main)
