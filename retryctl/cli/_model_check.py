"""Before a command relies on the embedded model (does its llama.cpp build run on this CPU?) or on an
extra of ``pip install retryctl`` (is it installed?).

``retryctl demo``, ``batch``, ``eval``, ``record``, ``sweep`` (offline) and ``serve --embedded`` check
that the ``local`` extra is installed, then the build once per installed build (the answer is cached),
and exit with a ``problem:`` line instead of writing an empty decision log and stopping at the first
call, or dying with SIGILL halfway through. A command that needs an extra (``serve``, ``calibrate``,
``--base-url``) checks it first and exits with one ``problem:`` line naming it instead of a traceback's
``ModuleNotFoundError``.
"""

from __future__ import annotations

import typer

__all__ = ["MODEL_EXIT", "require_embedded_build", "require_extra"]

MODEL_EXIT = 2
"""The exit code when the embedded model cannot run here (a model that cannot be set up), or an extra
the command needs is not installed."""


def require_embedded_build(command: str) -> None:
    """Exit :data:`MODEL_EXIT` with one ``problem:`` line on stderr if ``command`` cannot run the
    embedded model: the ``local`` extra is not installed, or its build cannot run here."""
    require_extra("local", command)
    # Imported here: the other commands never need the models package.
    from retryctl.models import check_embedded_build

    check = check_embedded_build()
    if not check.ok:
        typer.echo(f"problem: {check.problem}", err=True)
        raise typer.Exit(MODEL_EXIT)


def require_extra(extra: str, command: str) -> None:
    """Exit :data:`MODEL_EXIT` with one ``problem:`` line on stderr if ``extra`` is not installed:
    ``problem: retryctl serve needs the 'gateway' extra: pip install 'retryctl[gateway]'``."""
    from retryctl._extras import require_extra as check
    from retryctl.exceptions import MissingExtra

    try:
        check(extra, feature=command)
    except MissingExtra as exc:
        typer.echo(f"problem: {exc}", err=True)
        raise typer.Exit(MODEL_EXIT) from None
