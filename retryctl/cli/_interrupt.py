"""How a long command ends on Ctrl-C: one line on stderr saying what was kept and how to go on, exit 130.

130 is 128 + SIGINT, what a shell reports for a command interrupted by Ctrl-C (and what ``retryctl
demo`` and ``retryctl serve`` already exit with). ``batch`` appends a result line as each task
finishes, and ``eval``, ``record`` and ``sweep`` likewise; so what was kept is what the output files
hold, and the command to go on is the same command (``batch`` with ``--resume``). The command is
rebuilt from the options the user gave (their values, not the defaults), so it is one to copy.
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NoReturn

import typer

__all__ = ["INTERRUPTED_EXIT", "again_command", "interrupted"]

INTERRUPTED_EXIT = 130
"""The exit code after Ctrl-C (128 + SIGINT)."""


def _word(value: object) -> str:
    return os.fspath(value) if isinstance(value, Path) else str(value)


def again_command(ctx: typer.Context, *, add: Sequence[str] = ()) -> str:
    """The command line that runs ``ctx``'s command again with the values given (defaults left out),
    plus the flags ``add`` it lacks; quoted for a POSIX shell."""
    words = ["retryctl", ctx.info_name or ""]
    options: list[str] = []
    for param in ctx.command.params:
        value = ctx.params.get(param.name or "")
        many = bool(getattr(param, "multiple", False))
        if value is None or value == param.default or (many and not value):
            continue
        opts: Any = getattr(param, "opts", [])
        if getattr(param, "param_type_name", "") == "argument":
            words.append(_word(value))
        elif many:  # an option given once per value (``--stage``), in the order given
            options += [word for item in value for word in (opts[0], _word(item))]
        elif getattr(param, "is_flag", False):
            secondary: Any = getattr(param, "secondary_opts", [])
            options.append(opts[0] if value or not secondary else secondary[0])
        else:
            options += [opts[0], _word(value)]
    options += [flag for flag in add if flag not in options]
    return shlex.join([*words, *options])


def interrupted(kept: str, again: str) -> NoReturn:
    """End the command after Ctrl-C: ``interrupted: <kept>; to continue: <again>``, exit 130."""
    typer.echo(f"interrupted: {kept}; to continue: {again}", err=True)
    raise typer.Exit(INTERRUPTED_EXIT)
