"""The checks every command runs on the paths it is given, before it opens any of them.

A path problem is one :class:`PathError` naming the path and what is wrong, which the command line
prints as one line (exit 2). The rules:

- only regular files are read or written: a directory, FIFO, socket or device is refused from its
  ``stat``, before any ``open`` that could block (a FIFO) or never end (``/dev/zero``, ``/dev/full``);
  :func:`open_regular` re-checks on the descriptor it opens, without blocking;
- an output must be creatable or writable where it is (its directory exists and can be written);
- an output may not be one of the command's inputs, nor another of its outputs: the same file by
  device and inode (hard links and symlinks included), or by resolved path when it does not exist yet.
"""

from __future__ import annotations

import errno
import fcntl
import os
import stat
from collections.abc import Iterable

from retryctl.exceptions import UsageError

__all__ = ["PathError", "check_input", "check_output", "open_regular"]

PathLike = str | os.PathLike[str]


class PathError(UsageError):
    """A path given to retryctl cannot be used. ``what`` says which argument it is (``--out``)."""

    def __init__(self, *, path: str, what: str, problem: str) -> None:
        self.path = path
        self.what = what
        self.problem = problem
        super().__init__(f"{what} {_show(path)}: {problem}")


def _show(path: str) -> str:
    # A name with a newline or other control character is quoted, so the error stays one line.
    return path if path.isprintable() else repr(path)


def _kind(mode: int) -> str | None:
    """What a non-regular file is, or ``None`` for a regular file."""
    if stat.S_ISREG(mode):
        return None
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISFIFO(mode):
        return "a FIFO (named pipe)"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode):
        return "a character device"
    if stat.S_ISBLK(mode):
        return "a block device"
    return "not a regular file"


def _not_regular(name: str, what: str, kind: str) -> PathError:
    if kind == "a directory":
        return PathError(path=name, what=what, problem="is a directory; give a file's path")
    return PathError(path=name, what=what, problem=f"is {kind}, not a regular file; give a file's path")


def _stat(name: str, what: str) -> os.stat_result | None:
    """``os.stat`` of ``name`` (following symlinks); ``None`` if it does not exist."""
    try:
        return os.stat(name)
    except FileNotFoundError:
        return None
    except NotADirectoryError:
        return None  # a parent is a file: reported by the directory check
    except OSError as exc:
        raise PathError(path=name, what=what, problem=f"cannot stat: {exc.strerror or exc}") from None


def check_input(path: PathLike, what: str) -> str:
    """``path`` as a string, once it names an existing, readable regular file."""
    name = os.fspath(path)
    st = _stat(name, what)
    if st is None:
        raise PathError(path=name, what=what, problem="no such file")
    kind = _kind(st.st_mode)
    if kind is not None:
        raise _not_regular(name, what, kind)
    try:
        os.close(open_regular(name, os.O_RDONLY, what=what))
    except PathError:
        raise
    except OSError as exc:
        raise PathError(path=name, what=what, problem=f"cannot read: {exc.strerror or exc}") from None
    return name


def _identity(name: str) -> tuple[int, int] | str:
    """Device and inode of an existing file, else its resolved path."""
    try:
        st = os.stat(name)
    except OSError:
        return os.path.realpath(name)
    return (st.st_dev, st.st_ino)


def check_output(path: PathLike, what: str, *, inputs: Iterable[tuple[PathLike, str]] = ()) -> str:
    """``path`` as a string, once it is a regular file that can be written or a file that can be made.

    ``inputs`` are ``(path, what)`` pairs of the command's other files (inputs, and outputs checked
    before this one): ``path`` may be none of them.
    """
    name = os.fspath(path)
    st = _stat(name, what)
    if st is not None:
        kind = _kind(st.st_mode)
        if kind is not None:
            raise _not_regular(name, what, kind)
        try:  # opened for appending, as the command will: nothing changes, and root is tested too
            os.close(open_regular(name, os.O_WRONLY | os.O_APPEND, what=what))
        except PathError:
            raise
        except OSError as exc:
            raise PathError(path=name, what=what, problem=f"cannot write: {exc.strerror or exc}") from None
    else:
        parent = os.path.dirname(os.path.abspath(name))
        parent_st = _stat(parent, what)
        if parent_st is None:
            raise PathError(path=name, what=what, problem=f"its directory {_show(parent)} does not exist")
        if not stat.S_ISDIR(parent_st.st_mode):
            raise PathError(path=name, what=what, problem=f"{_show(parent)} is not a directory")
        _probe_create(name, parent, what)
    me = _identity(name)
    for other, other_what in inputs:
        if _identity(os.fspath(other)) == me:
            problem = f"is the same file as {other_what} {_show(os.fspath(other))}; it would be overwritten"
            raise PathError(path=name, what=what, problem=problem)
    return name


def _probe_create(name: str, parent: str, what: str) -> None:
    """Create ``name`` and remove it again: the one sure test that it can be made (root included)."""
    try:
        os.close(os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600))
    except FileExistsError:
        return  # made meanwhile, e.g. a dangling symlink's target: the open that follows decides
    except OSError as exc:
        problem = f"cannot create it in {_show(parent)}: {exc.strerror or exc}"
        raise PathError(path=name, what=what, problem=problem) from None
    os.unlink(name)


def open_regular(path: PathLike, flags: int, mode: int = 0o644, *, what: str = "file") -> int:
    """``os.open`` that never blocks on a FIFO and returns a descriptor only to a regular file.

    The file is opened with ``O_NONBLOCK`` (a FIFO opens at once, or fails with ``ENXIO`` for
    writing), checked with ``fstat``, and switched back to blocking I/O.
    """
    name = os.fspath(path)
    try:
        fd = os.open(name, flags | os.O_NONBLOCK | os.O_CLOEXEC, mode)
    except OSError as exc:
        if exc.errno == errno.ENXIO:
            raise _not_regular(name, what, "a FIFO (named pipe)") from None
        raise
    try:
        kind = _kind(os.fstat(fd).st_mode)
        if kind is not None:
            raise _not_regular(name, what, kind)
        fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~os.O_NONBLOCK)
    except BaseException:
        os.close(fd)
        raise
    return fd
