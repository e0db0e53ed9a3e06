"""Where the command line's warnings go: stderr, one line each, so stdout carries only the output.

``retryctl`` is an application of its own library, so it configures logging as an application does
(:mod:`retryctl._log` explains why the library itself stays silent): :func:`retryctl.cli.main`, the
``retryctl`` command, puts one handler on the root logger, at WARNING, that folds every record to a
single line (a pydantic error or a traceback would otherwise spill over several, and over a live
progress view). Python warnings (``warnings.warn``) are routed
through logging too, so they are folded the same way instead of printing their source line.
"""

from __future__ import annotations

import logging
import sys
from typing import TextIO

from retryctl._log import ROOT, one_line

__all__ = ["OneLineHandler", "install"]


class OneLineHandler(logging.Handler):
    """Writes each record as ``level: message`` on one line to the stderr of the moment.

    The stream is looked up at each record, not kept: tests and embedders swap ``sys.stderr``, and
    rich's live views put a proxy there that would send the line into the view on stdout.
    """

    def emit(self, record: logging.LogRecord) -> None:
        try:
            text = one_line(self.format(record))
            where = "" if record.name == ROOT or record.name.startswith(f"{ROOT}.") else f"{record.name}: "
            stream = _real_stderr()
            stream.write(f"{record.levelname.lower()}: {where}{text}\n")
            stream.flush()
        except Exception:
            self.handleError(record)


def _real_stderr() -> TextIO:
    stream = sys.stderr
    # rich.file_proxy.FileProxy (a live status or progress bar) proxies the real stream it replaced.
    proxied: TextIO = getattr(stream, "rich_proxied_file", stream)
    return proxied


def install() -> None:
    """Show WARNING and above from every logger on stderr, one line each (once per process)."""
    root = logging.getLogger()
    if not any(isinstance(h, OneLineHandler) for h in root.handlers):
        root.addHandler(OneLineHandler(logging.WARNING))
    logging.captureWarnings(True)
