"""Opening a decision log that a command was given with ``--log``: only an intact one is appended to.

``DecisionLog`` itself checks only the tail (it must open a large log fast); a command appending to a
log a person named verifies the whole chain first, so that it never extends a broken chain or a file
that is no decision log at all. ``demo`` and ``batch`` share this.
"""

from __future__ import annotations

from pathlib import Path

from retryctl.audit import DecisionLog, verify_log

__all__ = ["TORN_TAIL", "open_verified"]

TORN_TAIL = "torn tail"
"""How a verification problem about a torn last line begins (it is always the last line)."""


def open_verified(path: Path, *, repair: bool = False) -> DecisionLog:
    """The log at ``path`` opened for appending, once every record of it verifies.

    With ``repair``, a torn last line (a write cut short by a crash) passes the check and is cut and
    recorded by the writer. Raises the first :class:`~retryctl.exceptions.LogIntegrityError`, a
    ``UsageError`` from the writer, or ``OSError``; the file is unchanged.
    """
    report = verify_log(path) if path.exists() and path.stat().st_size else None
    error = report.error if report is not None else None
    if error is not None and not (repair and error.problem.startswith(TORN_TAIL)):
        raise error
    return DecisionLog(path, repair=repair)
