"""The ``retryctl`` command line: one typer app, one module per command.

A command's module is imported only when the command is registered, and :func:`main` registers only
the command named on the command line (all of them for ``retryctl --help``, no arguments or an unknown
name, so help and typer's errors list every command). ``retryctl audit`` thus does not import
langgraph, langchain and requests for ``batch`` and ``demo``: it starts in ~0.15 s instead of ~0.45 s.
:data:`app`, for tests and embedding, has every command and is built on first use.
"""

from __future__ import annotations

import importlib
import sys
from typing import TYPE_CHECKING

import typer

from retryctl.cli import _ending, _stderr
from retryctl.cli._flags import FlagCommand, FlagGroup

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
    "eval": ("retryctl.cli._eval", "eval_"),
    "calibrate": ("retryctl.cli._calibrate", "calibrate"),
    "record": ("retryctl.cli._record", "record"),
    "sweep": ("retryctl.cli._sweep", "sweep"),
    "serve": ("retryctl.cli._serve", "serve"),
}


def _root() -> None:
    """Confidence-gated retry controller for LangGraph agents."""


def _build(names: list[str]) -> typer.Typer:
    """The app with the commands ``names``."""
    built = typer.Typer(
        name="retryctl",
        cls=FlagGroup,
        help="Confidence-gated retry controller for LangGraph agents.",
        no_args_is_help=True,
        add_completion=False,
        pretty_exceptions_enable=False,
    )
    for name in names:
        module, function = _COMMANDS[name]
        built.command(name, cls=FlagCommand)(getattr(importlib.import_module(module), function))
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


def main() -> None:
    # The process is ours: warnings go to stderr one line each, stdout keeps only the output. (Not in
    # `app`, which tests and embedders run inside processes whose logging is theirs.) For the same
    # reason a command may end the process itself, without freeing its heap: OWN_PROCESS tells it so,
    # and the command decides (`_ending`; `retryctl audit` does, after a large log).
    _stderr.install()
    args = sys.argv[1:]
    command = args[0] if args and args[0] in _COMMANDS else None
    app = _build([command] if command is not None else list(_COMMANDS))
    app(obj=_ending.OWN_PROCESS)
