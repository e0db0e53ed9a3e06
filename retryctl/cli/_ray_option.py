"""``--ray ADDRESS`` of ``batch``, ``eval`` and ``record``: run the tasks on a Ray cluster.

``--ray local`` starts a cluster on this machine for the run (stopped at its end); ``--ray auto`` joins
the one ``ray start`` made here; ``--ray HOST:PORT`` (or ``ray://HOST:PORT``) connects to one. These
are ``ray.init``'s own address values. A bare ``--ray`` with no value is not offered: typer's parser
(0.29) has no option with an optional value (click's ``is_flag=False, flag_value=``), so ``local``
is said out loud.

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

__all__ = ["RayOption", "node_counts", "ray_executor"]

RayOption = Annotated[
    str | None,
    typer.Option(
        "--ray",
        metavar="ADDRESS",
        help="Run the tasks on a Ray cluster (the ray extra): 'local' starts one for the run, 'auto' "
        "joins the one started here, HOST:PORT connects to one. This process stays the only writer of "
        "results and the decision log.",
        show_default=False,
    ),
]


def ray_executor(
    address: str | None, *, per_worker: int, command: str, refused: Mapping[str, object] | None = None
) -> RayExecutor | None:
    """The executor ``--ray`` asks for (``None`` without it); a missing extra exits 2 with one line, as
    does an option of ``refused`` that was given (one that cannot work across machines)."""
    if address is None:
        return None
    for option, value in (refused or {}).items():
        if value is not None and value is not False:
            typer.echo(f"error: {option} cannot be used with --ray (workers on other machines)", err=True)
            raise typer.Exit(2)
    require_extra("ray", f"{command} --ray")
    from retryctl.batch._ray import RayExecutor
    from retryctl.exceptions import ConfigError

    try:
        return RayExecutor(address=address, per_worker=per_worker)
    except ConfigError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None


def node_counts(counts: Counter[str]) -> str:
    """``node 1a2b3c4d: 12 · node 5e6f7a8b: 11``: the progress bar's per-node tally."""
    return " · ".join(f"{node}: {n}" for node, n in sorted(counts.items()))
