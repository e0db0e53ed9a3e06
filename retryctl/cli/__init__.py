"""The ``retryctl`` command line: one typer app, one module per command."""

from __future__ import annotations

import typer

from retryctl.cli._audit import audit
from retryctl.cli._batch import batch
from retryctl.cli._bench import bench
from retryctl.cli._demo import demo
from retryctl.cli._doctor import doctor

__all__ = ["app", "main"]

app = typer.Typer(
    name="retryctl",
    help="Confidence-gated retry controller for LangGraph agents.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
app.command("bench")(bench)
app.command("audit")(audit)
app.command("batch")(batch)
app.command("demo")(demo)
app.command("doctor")(doctor)


@app.callback()
def _root() -> None:
    """Confidence-gated retry controller for LangGraph agents."""


def main() -> None:
    app()
