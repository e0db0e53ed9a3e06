"""The console the commands print their tables on."""

from __future__ import annotations

from rich.console import Console

__all__ = ["table_console"]

PIPED_WIDTH = 160
"""The width of tables written to a pipe or a file: a table squeezed into rich's default 80 columns
there cut its figures to ``0.1…`` (a new user's ``retryctl eval ... > file``)."""


def table_console(*, stderr: bool = False) -> Console:
    """A console for tables: the terminal's width on a terminal, :data:`PIPED_WIDTH` elsewhere."""
    console = Console(stderr=stderr)
    return console if console.is_terminal else Console(stderr=stderr, width=PIPED_WIDTH)
