"""The host's end of a job's stdout or stderr: a pipe read as it fills, with a cap on what is kept.

A job's output is never a file of the caller's: a file on the host's disk can be grown past every
limit (``fallocate(FALLOC_FL_KEEP_SIZE)`` skips ``RLIMIT_FSIZE``), and an open file description the
caller shares with the job is the job's to change (``O_DIRECT`` makes the caller's read fail). A pipe
has neither: its two ends are separate descriptions, and it holds no more than its buffer.
"""

from __future__ import annotations

import contextlib
import os

__all__ = ["CappedPipe"]

_CHUNK = 1 << 16


class CappedPipe:
    """The read end of one output pipe: the first ``keep`` bytes are kept, the rest counted and
    dropped; once ``limit`` bytes have come the pipe is closed, so the job's next write fails
    (``EPIPE``) as a write past ``RLIMIT_FSIZE`` would, instead of costing the host reads until the
    timeout. Owns ``fd`` (made non-blocking) and closes it."""

    def __init__(self, fd: int, *, keep: int, limit: int) -> None:
        os.set_blocking(fd, False)
        self.fd = fd
        """The pipe's read end, or -1 once closed."""
        self.keep = keep
        self.limit = limit
        self.kept = bytearray()
        """What was kept, at most ``keep`` bytes."""
        self.size = 0
        """Every byte read (and, past ``limit``, at least one more was offered)."""

    def pump(self) -> bool:
        """Read what is there now (one chunk); False once the pipe is closed (EOF or past its limit)."""
        if self.fd < 0:
            return False
        try:
            chunk = os.read(self.fd, _CHUNK)
        except BlockingIOError:
            return True
        except OSError:  # nothing the job does to its end can make this fail; stop reading if it does
            chunk = b""
        if not chunk:
            self.close()
            return False
        self._take(chunk)
        return self.fd >= 0

    def finish(self) -> None:
        """Read what is left once no writer runs any more (up to the limit), then close."""
        while self.fd >= 0:
            try:
                chunk = os.read(self.fd, _CHUNK)
            except BlockingIOError:  # a writer is still alive: what it writes later is not read
                break
            except OSError:
                break
            if not chunk:
                break
            self._take(chunk)
        self.close()

    def _take(self, chunk: bytes) -> None:
        room = self.keep - len(self.kept)
        if room > 0:
            self.kept += chunk[:room]
        self.size += len(chunk)
        if self.size > self.limit:
            self.close()

    def close(self) -> None:
        """Close the read end (safe to call twice)."""
        if self.fd >= 0:
            with contextlib.suppress(OSError):
                os.close(self.fd)
            self.fd = -1
