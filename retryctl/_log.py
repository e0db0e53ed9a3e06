"""retryctl's own log events (``backend.retry``, ``backend.n_ignored``, ``constraint.relaxed``...): silent
until the application asks for them.

A library must not print. structlog's default logger prints to stdout, so a bare
``structlog.get_logger()`` in a library writes into the output of every program that imports it
(``retryctl batch --json > out`` stopped being JSON). Python's convention for libraries (the logging
HOWTO, "Configuring Logging for a Library") is a logger tree under the package's name whose top has a
``NullHandler``: nothing shows until the application configures logging, and then everything does, as
the application filters and formats it. The ``NullHandler`` also keeps :data:`logging.lastResort` from
printing retryctl's warnings to stderr in a program that configured nothing.

So :func:`get_logger` returns an :class:`EventLogger`, which logs like structlog (an event name and
key-value fields) and chooses the way at each call, not at import (applications configure logging
after importing their libraries):

- when the application configured structlog (``structlog.configure(...)``, or inside
  ``structlog.testing.capture_logs()``), through the application's structlog pipeline, under the same
  logger name (structlog counts as configured from its first ``configure`` on, ``capture_logs``
  included, until ``structlog.reset_defaults()``);
- otherwise to the standard library logger of that name (``logging.getLogger("retryctl.models")``), as
  one line ``event key=value ...``; the event and its fields also travel as the record attribute
  ``retryctl`` (a dict) for a structured handler.

A program that configures neither sees nothing. The command line is an application like any other: it
installs :class:`retryctl.cli._stderr.OneLineHandler`, which shows warnings and errors on stderr, one
line each, and leaves stdout to the command's output.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

__all__ = ["ROOT", "EventLogger", "get_logger", "one_line", "render"]

ROOT = "retryctl"
"""The top of retryctl's standard library logger tree."""

logging.getLogger(ROOT).addHandler(logging.NullHandler())


def one_line(text: object) -> str:
    """``text`` on one line: its lines stripped and joined with ``"; "`` (a pydantic error has 3 or more)."""
    return "; ".join(part for line in str(text).splitlines() if (part := line.strip()))


def render(event: str, fields: Mapping[str, Any]) -> str:
    """``event key=value ...`` on one line; strings are quoted, multi-line values folded."""
    parts = [event]
    for key, value in fields.items():
        shown = repr(one_line(value)) if isinstance(value, str) else one_line(repr(value))
        parts.append(f"{key}={shown}")
    return " ".join(parts)


class EventLogger:
    """A structlog-style logger for one module of retryctl (see the module docstring)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._stdlib = logging.getLogger(name)

    def debug(self, event: str, **fields: Any) -> None:
        """Log ``event`` at DEBUG."""
        self._log(logging.DEBUG, "debug", event, fields)

    def info(self, event: str, **fields: Any) -> None:
        """Log ``event`` at INFO."""
        self._log(logging.INFO, "info", event, fields)

    def warning(self, event: str, **fields: Any) -> None:
        """Log ``event`` at WARNING."""
        self._log(logging.WARNING, "warning", event, fields)

    def error(self, event: str, **fields: Any) -> None:
        """Log ``event`` at ERROR."""
        self._log(logging.ERROR, "error", event, fields)

    def _log(self, level: int, method: str, event: str, fields: dict[str, Any]) -> None:
        # Imported here: the command line imports this module for `one_line`, and structlog would add
        # ~0.1 s to the start of `retryctl audit`, which logs nothing.
        import structlog

        if structlog.is_configured():
            getattr(structlog.get_logger(self.name), method)(event, **fields)
        elif self._stdlib.isEnabledFor(level):
            # stacklevel 3: the record names the retryctl line that logged, not this helper.
            self._stdlib.log(
                level,
                "%s",
                render(event, fields),
                extra={"retryctl": {"event": event, **fields}},
                stacklevel=3,
            )


def get_logger(name: str) -> EventLogger:
    """The logger of one retryctl module; ``name`` is its place in the tree (``"retryctl.models"``)."""
    if name != ROOT and not name.startswith(f"{ROOT}."):
        raise ValueError(f"retryctl's loggers live under {ROOT!r}, not {name!r}")
    return EventLogger(name)
