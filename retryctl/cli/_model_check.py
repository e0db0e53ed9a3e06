"""Before a command relies on the embedded model: does its llama.cpp build run on this CPU?

``retryctl demo`` and ``retryctl batch`` (offline, on the default graph) check once per installed build
(the answer is cached) and exit with a ``problem:`` line instead of dying with SIGILL halfway through.
"""

from __future__ import annotations

import typer

__all__ = ["MODEL_EXIT", "require_embedded_build"]

MODEL_EXIT = 2
"""The exit code when the embedded model cannot run here (a model that cannot be set up)."""


def require_embedded_build() -> None:
    """Exit :data:`MODEL_EXIT` with one ``problem:`` line on stderr if the embedded build cannot run."""
    # Imported here: the other commands never need the models package.
    from retryctl.models import check_embedded_build

    check = check_embedded_build()
    if not check.ok:
        typer.echo(f"problem: {check.problem}", err=True)
        raise typer.Exit(MODEL_EXIT)
