"""How a command ends the process, when the process is the command line's own.

``retryctl audit`` of a million records builds a few million objects (steps, totals, charges). Freeing
them when the process exits takes a tenth of a second or more, and a cyclic collection on the way out
walks every one of them (60 ms), for nothing: the process is about to end. So when the process is the
command line's own (started by :func:`retryctl.cli.main`), such a command keeps what it built to the
end and leaves by :func:`hard_exit`, which flushes the output and exits without freeing anything, as
mypy does (``mypy.util.hard_exit``). The command decides this itself (see ``retryctl.cli._audit``);
:func:`retryctl.cli.main` only says whose process it is, by handing :data:`OWN_PROCESS` to the app as
its context object, which the command reads from its own ``typer.Context``. Called in-process
(typer's test runner, an embedding program), a command never finds it there, and everything ends
and is freed as usual.
"""

from __future__ import annotations

import os
import sys
from typing import Final, NoReturn

import typer

__all__ = ["OWN_PROCESS", "hard_exit", "own_process"]

OWN_PROCESS: Final = object()
"""The context object :func:`retryctl.cli.main` runs the app with: the process is the command's to end."""


def own_process(ctx: typer.Context) -> bool:
    """Whether the command running in ``ctx`` may end the process itself (it was started by ``main``)."""
    return ctx.find_root().obj is OWN_PROCESS


def hard_exit(code: int) -> NoReturn:
    """Exit with ``code``, output flushed, without freeing anything (``os._exit``)."""
    status = code
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed pipe or stream: the interpreter's own exit says 120
            status = status or 120
    os._exit(status)
