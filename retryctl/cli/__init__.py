"""The ``retryctl`` command line: one typer app, one module per command.

A command's module is imported only when the command is registered, and :func:`main` registers only
the command named on the command line (all of them for ``retryctl --help``, no arguments or an unknown
name, so help and typer's errors list every command). ``retryctl audit`` thus does not import
langgraph, langchain and requests for ``batch`` and ``demo``: it starts in ~0.15 s instead of ~0.45 s.
:data:`app`, for tests and embedding, has every command and is built on first use.
"""

from __future__ import annotations

import gc
import importlib
import os
import sys
from typing import TYPE_CHECKING, NoReturn

import typer

from retryctl.cli import _ending, _stderr

if TYPE_CHECKING:
    app: typer.Typer

__all__ = ["app", "main"]

# name -> (module, function), in the order `retryctl --help` lists them.
_COMMANDS = {
    "bench": ("retryctl.cli._bench", "bench"),
    "audit": ("retryctl.cli._audit", "audit"),
    "batch": ("retryctl.cli._batch", "batch"),
    "demo": ("retryctl.cli._demo", "demo"),
    "doctor": ("retryctl.cli._doctor", "doctor"),
}


def _root() -> None:
    """Confidence-gated retry controller for LangGraph agents."""


def _build(names: list[str]) -> typer.Typer:
    """The app with the commands ``names``."""
    built = typer.Typer(
        name="retryctl",
        help="Confidence-gated retry controller for LangGraph agents.",
        no_args_is_help=True,
        add_completion=False,
        pretty_exceptions_enable=False,
    )
    for name in names:
        module, function = _COMMANDS[name]
        built.command(name)(getattr(importlib.import_module(module), function))
    # The root callback keeps `retryctl audit ...` a subcommand even when audit is the only command.
    built.callback()(_root)
    return built


def __getattr__(name: str) -> object:
    if name != "app":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    globals()["app"] = built = _build(list(_COMMANDS))
    return built


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})


# Commands whose process has nothing left to do after its output: it exits without freeing its heap,
# as mypy does (`mypy.util.hard_exit`; see `_ending`). Freeing the few million objects of a
# million-record audit takes a tenth of a second or more, and nothing in the audit waits for an exit
# handler.
_HARD_EXIT = frozenset({"audit"})


def main() -> None:
    # The process is ours: warnings go to stderr one line each, stdout keeps only the output. (Not in
    # `app`, which tests and embedders run inside processes whose logging is theirs.)
    _stderr.install()
    args = sys.argv[1:]
    command = args[0] if args and args[0] in _COMMANDS else None
    app = _build([command] if command is not None else list(_COMMANDS))
    if command not in _HARD_EXIT:
        app()
        return
    # The collector stays off too: what the command builds is acyclic or lives until the exit, and a
    # collection after a million-record pass would walk every object built during it (60 ms).
    gc.disable()
    _ending.HEAP = []
    try:
        app()
        code: object = 0
    except SystemExit as exc:  # typer (click) always ends this way; other exceptions go the usual way
        code = exc.code
    _hard_exit(code)


def _hard_exit(code: object) -> NoReturn:
    """Exit as ``SystemExit(code)`` would, output flushed, without freeing anything."""
    if code is None:
        status = 0
    elif isinstance(code, int):
        status = code
    else:
        print(code, file=sys.stderr)
        status = 1
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed pipe or stream: the interpreter's own exit says 120
            status = status or 120
    os._exit(status)
