"""``--ray [ADDRESS]`` of ``batch``, ``eval`` and ``record``: run the tasks on a Ray cluster.

``--ray`` alone (or ``--ray local``) starts a cluster on this machine for the run (stopped at its end);
``--ray auto`` joins the one ``ray start`` made here; ``--ray HOST:PORT`` (or ``ray://HOST:PORT``)
connects to one. These are ``ray.init``'s own address values.

A bare ``--ray``: typer 0.29 vendors a click without options of an optional value (click's
``is_flag=False, flag_value=``), so :func:`bare_ray` rewrites a bare ``--ray`` of these three commands
into ``--ray=local`` before their arguments are parsed (``FlagCommand.parse_args``, which runs for the
``retryctl`` command and for tests' ``app`` alike). ``--ray=ADDR`` and ``--ray ADDR`` are left as given.

Under ``--ray`` a command's ``--concurrency`` is the tasks each worker runs at once; the workers are
the cluster's CPUs (one actor per CPU), so tasks out at once are workers x concurrency.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from typing import TYPE_CHECKING, Annotated

import typer

from retryctl.cli._model_check import require_extra

if TYPE_CHECKING:
    from retryctl.batch._ray import RayExecutor

__all__ = ["RAY", "RayOption", "bare_ray", "node_counts", "ray_executor"]

RAY = "--ray"
"""The option's name."""

_BARE = "local"
"""What a bare ``--ray`` means: a cluster started for the run."""

RayOption = Annotated[
    str | None,
    typer.Option(
        RAY,
        metavar="[ADDRESS]",
        help="Run the tasks on a Ray cluster (the ray extra): alone or 'local' starts one for the run, "
        "'auto' joins the one started here, HOST:PORT connects to one. This process stays the only "
        "writer of results and the decision log.",
        show_default=False,
    ),
]


def bare_ray(args: list[str]) -> list[str]:
    """``args`` with a bare ``--ray`` (the last argument, or followed by another option) made
    ``--ray=local``; anything after ``--`` is an argument, left alone."""
    out = list(args)
    for i, arg in enumerate(out):
        if arg == "--":
            break
        if arg == RAY and (i + 1 == len(out) or out[i + 1].startswith("-")):
            # No address starts with "-": the next word is another option (or "--").
            out[i] = f"{RAY}={_BARE}"
    return out


def ray_executor(
    address: str | None, *, per_worker: int, command: str, refused: Mapping[str, object] | None = None
) -> RayExecutor | None:
    """The executor ``--ray`` asks for (``None`` without it); a missing extra exits 2 with one line, as
    do an option of ``refused`` that was given (one that cannot work across machines) and an address
    where no Ray cluster answers."""
    if address is None:
        return None
    for option, value in (refused or {}).items():
        if value is not None and value is not False:
            typer.echo(f"error: {option} cannot be used with --ray (workers on other machines)", err=True)
            raise typer.Exit(2)
    require_extra("ray", f"{command} --ray")
    from retryctl.batch._ray import RayExecutor, check_address
    from retryctl.batch._ray_probe import probe_cluster
    from retryctl.exceptions import ConfigError

    try:
        check_address(address, field=RAY)
        probe_cluster(address, field=RAY)  # before any file is made: ray.init would hang on it
        return RayExecutor(address=address, per_worker=per_worker)
    except ConfigError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None


def node_counts(counts: Counter[str]) -> str:
    """``node 1a2b3c4d: 12 · node 5e6f7a8b: 11``: the progress bar's per-node tally."""
    return " · ".join(f"{node}: {n}" for node, n in sorted(counts.items()))
