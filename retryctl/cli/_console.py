"""The console the commands print their tables on, and the marks their progress lines grade with."""

from __future__ import annotations

from rich.console import Console

__all__ = ["ABSTAINED", "RIGHT", "WRONG", "grade_mark", "table_console"]

RIGHT = "✓"
"""An accepted (or, for a baseline, given) answer equal to the gold one."""
WRONG = "✗"
"""An accepted (or given) answer that is not the gold one."""
ABSTAINED = "∅"
"""No answer accepted (``stopped``, ``needs_user``): whatever the last candidate was, it was not given,
so it is neither right nor wrong; the figures count it as not right (``retryctl._scores``)."""

_GIVEN = (None, "accepted", "baseline")

PIPED_WIDTH = 160
"""The width of tables written to a pipe or a file: a table squeezed into rich's default 80 columns
there cut its figures to ``0.1…`` (a new user's ``retryctl eval ... > file``)."""


def table_console(*, stderr: bool = False) -> Console:
    """A console for tables: the terminal's width on a terminal, :data:`PIPED_WIDTH` elsewhere."""
    console = Console(stderr=stderr)
    return console if console.is_terminal else Console(stderr=stderr, width=PIPED_WIDTH)


def grade_mark(line: dict[str, object]) -> str:
    """`` ✓``/`` ✗`` for a given answer with gold, `` ∅`` for an abstention, ``""`` for an ungraded one."""
    if line.get("status") not in _GIVEN:
        return f" {ABSTAINED}"
    return "" if "correct" not in line else f" {RIGHT}" if line["correct"] else f" {WRONG}"
