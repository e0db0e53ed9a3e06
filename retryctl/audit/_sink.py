"""The append-only JSONL sink that chains records, safe across threads and processes.

Every append runs under an exclusive ``flock`` on the log file and is one ``os.write`` on a descriptor
opened with ``O_APPEND``: the line lands whole at the end, never interleaved with another writer's.
Under the same lock the sink learns the hash of the last record. It caches that hash with the file
size it saw after its own last write and re-reads the tail only when the size has changed (another
writer appended, or someone truncated the file), so a single writer never re-reads anything.

A last line without a newline is a write cut short (the writer always ends a line with one). The sink
never chains onto it, however often it is asked to: it raises
:class:`~retryctl.exceptions.LogIntegrityError` on every write unless it was opened with
``repair=True``, in which case it cuts the torn bytes and appends a ``repair`` record naming how many
bytes were cut and their sha256, so that the repair is itself on the record. It cuts only what looks
like a torn record (bytes that begin with ``{`` after a last line that is a valid record): a file that
is not a decision log is never cut.

A write that fails (``ENOSPC``, ``EIO``, a short write and then an error) is undone under the lock: the
bytes of the unfinished line are cut off again, so that the file ends where it ended before. Either
way the next write re-reads the tail and re-derives the chain head before it appends, so a failure
never leaves the sink chaining onto bytes it has not checked; when space comes back, the log continues.

A sink used in a child after ``fork`` reopens the file on its first write there, so parent and child
hold separate locks (a shared descriptor would share the flock and exclude nothing).
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import re
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, NoReturn

from retryctl._paths import open_regular
from retryctl.audit._canonical import (
    GENESIS_HASH,
    HASH_RE,
    SCHEMA_VERSION,
    encode_line,
    fast_line_hash,
    hash_last,
    loads_strict,
    record_hash,
)
from retryctl.exceptions import LogIntegrityError

__all__ = ["ChainSink"]

_CHUNK = 1 << 16


_CANONICAL_START = re.compile(rb'\{"[^"\\]*(?:":(?! )|"$|$)')
"""The start of a record line: no spaces, as canonical JSON is written (another file's JSON has them)."""


def _looks_torn(torn: bytes, *, after_record: bool) -> bool:
    """Whether bytes after the last newline look like a record cut short (and may be cut)."""
    if not torn.startswith(b"{"):
        return False
    try:
        whole = loads_strict(torn)
    except ValueError:
        # Cut short, as expected. With no record before it, it must also begin as a record line does.
        return after_record or _CANONICAL_START.match(torn) is not None
    return isinstance(whole, dict) and "hash" in whole  # a record that lost only its newline


class ChainSink:
    """Appends records to one JSONL file, each carrying ``prev_hash`` and ``hash``.

    ``now`` returns the timestamp string for records the sink writes on its own (``repair``).
    """

    def __init__(
        self,
        path: str,
        *,
        fsync: bool = False,
        repair: bool = False,
        now: Callable[[], str],
    ) -> None:
        self.path = path
        self.fsync = fsync
        self.repair = repair
        self._now = now
        self._lock = threading.Lock()
        self._fd = -1
        self._pid = -1
        self._size = -1
        self._head = GENESIS_HASH
        self._write = os.write  # the one call that writes a line (a test injects a failing one)
        self.repaired_bytes = 0
        """Torn bytes cut (each cut recorded by a ``repair`` record) since the sink was opened."""
        self._open()
        with self._lock, self._flocked():
            self._sync_tail()

    # -- public -----------------------------------------------------------------------------------

    @property
    def head(self) -> str:
        """The hash of the last record this sink wrote or saw."""
        return self._head

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called."""
        return self._fd < 0

    def msg(self, record: dict[str, Any], *, validated: bool = False) -> dict[str, Any]:
        """Chain ``record`` onto the log and append it; return it with ``prev_hash`` and ``hash``.

        Named ``msg`` because structlog calls the wrapped logger's method of the name that was logged.
        ``validated=True`` (the writer's pipeline passes it) says a record model checked ``record``,
        so the faster canonical encoder may be used; the bytes written are the same.
        """
        if "prev_hash" in record or "hash" in record:
            raise ValueError("'prev_hash' and 'hash' are set by the sink; a processor must not set them")
        if self._pid != os.getpid() and self._fd >= 0:
            self._after_fork()
        with self._lock:
            if self._fd < 0:
                raise ValueError(f"decision log {self.path} is closed")
            fcntl.flock(self._fd, fcntl.LOCK_EX)  # as _flocked(), without a generator per record
            try:
                self._sync_tail()
                return self._append(record, validated=validated)
            finally:
                fcntl.flock(self._fd, fcntl.LOCK_UN)

    def msg_around_head(self, before: bytes, after: bytes) -> str:
        """Append the record whose canonical bytes without ``hash`` are ``before + prev_hash +
        after`` (``before`` ends inside the ``prev_hash`` string, ``after`` starts there); return its
        hash. The caller vouches that the bytes are a validated record's canonical JSON and that the
        hash may go last (see :func:`~retryctl.audit._canonical.encode_line`): what a
        :class:`~retryctl.audit._fastbody.VerdictLine` makes. Locks, checks and writes as :meth:`msg`.
        """
        if self._pid != os.getpid() and self._fd >= 0:
            self._after_fork()
        with self._lock:
            if self._fd < 0:
                raise ValueError(f"decision log {self.path} is closed")
            fcntl.flock(self._fd, fcntl.LOCK_EX)
            try:
                self._sync_tail()
                line, digest = hash_last(before + self._head.encode() + after)
                self._write_line(line, digest)
                return digest
            finally:
                fcntl.flock(self._fd, fcntl.LOCK_UN)

    def close(self) -> None:
        """Close the file. Idempotent."""
        with self._lock:
            if self._fd >= 0:
                os.close(self._fd)
                self._fd = -1

    # -- internals (called with both locks held) --------------------------------------------------

    def _after_fork(self) -> None:
        # A forked child shares the parent's open file description, and with it the flock: the
        # two would not exclude each other. Reopen to get a description (and a lock) of our own.
        # The thread lock is replaced too: a parent thread may have held it at the fork.
        self._lock = threading.Lock()
        os.close(self._fd)
        self._open()

    def _open(self) -> None:
        flags = os.O_RDWR | os.O_APPEND | os.O_CREAT
        self._fd = open_regular(self.path, flags, 0o644, what="decision log")
        self._pid = os.getpid()
        self._size = -1

    @contextmanager
    def _flocked(self) -> Iterator[None]:
        fcntl.flock(self._fd, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(self._fd, fcntl.LOCK_UN)

    def _append(self, record: dict[str, Any], *, validated: bool) -> dict[str, Any]:
        body = {**record, "prev_hash": self._head}
        line, digest = encode_line(body, validated=validated)
        self._write_line(line, digest)
        body["hash"] = digest
        return body

    def _write_line(self, line: bytes, digest: str) -> None:
        view = memoryview(line)
        start = self._size
        try:
            while view:
                # One write for the whole line in practice; the loop only guards a short write, and
                # the flock keeps other writers out until the line is complete.
                view = view[self._write(self._fd, view) :]
            if self.fsync:
                os.fsync(self._fd)
        except BaseException:
            self._undo(start)
            raise
        self._size += len(line)
        self._head = digest

    def _undo(self, start: int) -> None:
        """After a failed write: cut what it left (the lock is still ours), and re-check next time."""
        self._size = -1  # the next write re-reads the tail, whatever happens here
        if start < 0:
            return
        try:
            if os.fstat(self._fd).st_size > start:
                os.ftruncate(self._fd, start)
        except OSError:
            pass  # the torn bytes stay; the next write finds them and refuses to chain onto them

    def _sync_tail(self) -> None:
        size = os.fstat(self._fd).st_size
        if size == self._size:
            return
        # The size is cached only once the tail checked out: a torn tail raises on every write.
        self._size = -1
        if size == 0:
            self._head = GENESIS_HASH
            self._size = 0
            return
        last_nl = self._rfind_newline(size)
        if last_nl != size - 1:
            self._torn_tail(size, last_nl)
            return
        self._head = self._hash_of_line_before(last_nl + 1, size)
        self._size = size

    def _hash_of_line_before(self, end: int, size: int) -> str:
        """The hash of the complete line that ends (with its newline) at ``end``."""
        prev_nl = self._rfind_newline(end - 1)
        line = os.pread(self._fd, end - 1 - prev_nl, prev_nl + 1)
        return self._hash_of_last(line, size)

    def _hash_of_last(self, line: bytes, size: int) -> str:
        fast = fast_line_hash(line)
        if fast is not None:
            return fast[1].decode()
        # Slow path: a line re-serialised by another tool, or a damaged one.
        try:
            obj = loads_strict(line)
        except ValueError as exc:
            self._fail(size, from_end=1, problem=f"last record is not valid JSON: {exc}")
        stored = obj.get("hash") if isinstance(obj, dict) else None
        if not isinstance(stored, str) or not HASH_RE.fullmatch(stored):
            self._fail(size, from_end=1, problem="last record has no valid 'hash'")
        if record_hash(obj) != stored:
            self._fail(size, from_end=1, problem="last record's hash does not match its content")
        return stored

    def _torn_tail(self, size: int, last_nl: int) -> None:
        if not self.repair:
            self._fail(
                size,
                from_end=0,
                problem=(
                    f"torn tail: the last {size - last_nl - 1} bytes are not a complete line "
                    "(a write was cut short); open the log with repair=True to cut them"
                ),
            )
        torn = os.pread(self._fd, size - last_nl - 1, last_nl + 1)
        # Cut only a torn record of a decision log: the line before it must be a valid record
        # (this raises if it is not), and the torn bytes must begin as a record does.
        if last_nl >= 0:
            self._hash_of_line_before(last_nl + 1, size)
        if not _looks_torn(torn, after_record=last_nl >= 0):
            self._fail(
                size,
                from_end=0,
                problem=(
                    f"the last {len(torn)} bytes are not a complete line and do not begin like a "
                    "record: this does not look like a decision log, so nothing is cut"
                ),
            )
        os.ftruncate(self._fd, last_nl + 1)
        os.fsync(self._fd)
        self._size = -1
        self._sync_tail()
        self._append(
            {
                "schema": SCHEMA_VERSION,
                "kind": "repair",
                "ts": self._now(),
                "truncated_bytes": len(torn),
                "truncated_sha256": hashlib.sha256(torn).hexdigest(),
            },
            validated=True,  # built here from a str, an int and a hex digest
        )
        self.repaired_bytes += len(torn)

    def _rfind_newline(self, end: int) -> int:
        """Offset of the last ``\\n`` strictly before ``end``, or -1."""
        pos = end
        while pos > 0:
            start = max(0, pos - _CHUNK)
            idx = os.pread(self._fd, pos - start, start).rfind(b"\n")
            if idx >= 0:
                return start + idx
            pos = start
        return -1

    def _fail(self, size: int, *, from_end: int, problem: str) -> NoReturn:
        """Raise for the last line (``from_end=1``: the last complete line; 0: a torn tail)."""
        lines = 0
        for start in range(0, size, _CHUNK):
            lines += os.pread(self._fd, min(_CHUNK, size - start), start).count(b"\n")
        index = lines - from_end
        raise LogIntegrityError(path=self.path, line=index + 1, index=index, problem=problem)
