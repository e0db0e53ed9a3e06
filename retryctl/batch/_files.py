"""The batch's two files: the task list it reads and the results file it appends to.

Tasks are JSONL, one ``{"id", "question", "gold"?}`` object a line; blank lines are skipped and any
other malformed line (not UTF-8, not JSON, longer than :data:`MAX_TASK_LINE_BYTES`, a wrong field) is a
:class:`TaskFormatError` naming the file and line, as is a file without any task.

Results are JSONL too, one object per finished task, each line written whole by one ``os.write`` on a
descriptor opened with ``O_APPEND`` and ended by a newline. A crash can therefore leave at most one
torn last line (bytes after the last newline): :func:`read_results` finds it, and :class:`ResultsFile`
cuts it before appending, so the task it belonged to simply runs again on ``--resume``. A write that
fails (a full disk) is undone at once, so a later append never lands on a half line.

A results file is recognised by its content: every complete line is a result (a JSON object with an
``id`` and a ``status``), and a torn tail begins like one (``{``). Anything else (a JSON document, a
text file, another tool's JSONL) is a :class:`TaskFormatError` naming the file and the line, and its
bytes are left alone. Both files are opened only if they are regular files (``open_regular``): a
FIFO or a device is refused without blocking.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from retryctl._paths import open_regular
from retryctl.exceptions import TaskFormatError

__all__ = [
    "BANK_LINES",
    "RESULT_LINES",
    "LineKind",
    "ResultsFile",
    "ResultsState",
    "Task",
    "TaskFormatError",
    "load_tasks",
    "read_results",
]

MAX_TASK_LINE_BYTES = 1 << 20
"""A longer task line is refused (about 250k tokens: more than a model's context), and never read whole."""


@dataclass(frozen=True, kw_only=True)
class Task:
    """One task of a batch."""

    id: str
    """Unique within the task file; the key ``--resume`` matches results on."""
    question: str
    """What the graph is asked."""
    gold: str | None = None
    """The right answer, when known (then the summary reports accuracy)."""
    stratum: str | None = None
    """A difficulty stratum, when the task file names one (``retryctl eval`` reports per stratum)."""


def load_tasks(path: str | os.PathLike[str]) -> list[Task]:
    """Every task of a JSONL task file, in order; a malformed line raises :class:`TaskFormatError`."""
    name = os.fspath(path)
    tasks: list[Task] = []
    seen: dict[str, int] = {}
    with open(open_regular(name, os.O_RDONLY, what="task file"), "rb") as f:
        number = 0
        # readline with a cap: an oversized line (or a binary file without newlines) is refused
        # after reading one byte past the limit, not loaded whole.
        while raw := f.readline(MAX_TASK_LINE_BYTES + 1):
            number += 1
            if len(raw) > MAX_TASK_LINE_BYTES:
                raise TaskFormatError(
                    path=name, line=number, problem=f"line longer than {MAX_TASK_LINE_BYTES} bytes"
                )
            task = _task(name, number, raw)
            if task is None:
                continue
            if task.id in seen:
                problem = f"duplicate id {task.id!r} (first on line {seen[task.id]})"
                raise TaskFormatError(path=name, line=number, problem=problem)
            seen[task.id] = number
            tasks.append(task)
    if not tasks:
        raise TaskFormatError(path=name, line=1, problem="the task file has no tasks")
    return tasks


def _task(name: str, number: int, raw: bytes) -> Task | None:
    """One line as a task (``None`` for a blank line)."""

    def bad(problem: str) -> TaskFormatError:
        return TaskFormatError(path=name, line=number, problem=problem)

    try:
        line = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise bad(f"not UTF-8 text (byte {exc.start + 1})") from None
    if not line.strip():
        return None
    try:
        obj = json.loads(line)
    except RecursionError:
        raise bad("not JSON: nested too deeply") from None
    except ValueError as exc:
        raise bad(f"not JSON: {exc}") from None
    if "\\u" in line:
        # Only an escape can smuggle in a lone surrogate ("\\ud800"), which the UTF-8 results file
        # could not hold: refuse it here rather than when the finished task is written.
        try:
            json.dumps(obj, ensure_ascii=False).encode()
        except UnicodeEncodeError:
            raise bad("not valid Unicode: a lone surrogate escape such as \\ud800") from None
    if not isinstance(obj, dict):
        raise bad("a task must be a JSON object with 'id' and 'question'")
    task_id, question, gold = obj.get("id"), obj.get("question"), obj.get("gold")
    if not isinstance(task_id, str | int) or isinstance(task_id, bool) or str(task_id) == "":
        raise bad(f"'id' must be a non-empty string or an integer, got {task_id!r}")
    if not isinstance(question, str) or not question.strip():
        raise bad(f"'question' must be a non-empty string, got {question!r}")
    if gold is not None and (
        isinstance(gold, bool)
        or not isinstance(gold, str | int | float)
        or (isinstance(gold, float) and not math.isfinite(gold))
    ):
        raise bad(f"'gold' must be a string or a finite number, got {gold!r}")
    stratum = obj.get("stratum")
    if stratum is not None and (not isinstance(stratum, str) or not stratum):
        raise bad(f"'stratum' must be a non-empty string, got {stratum!r}")
    return Task(id=str(task_id), question=question, gold=None if gold is None else str(gold), stratum=stratum)


@dataclass(frozen=True, kw_only=True)
class ResultsState:
    """What a results file holds."""

    results: list[dict[str, Any]]
    """Every complete result line, in order."""
    torn_bytes: int
    """Length of a torn last line (0 when the file ends cleanly)."""
    valid_size: int
    """Bytes up to and including the last complete line."""

    @property
    def finished(self) -> set[str]:
        """Ids of tasks that ended (any status but ``error``, which ``--resume`` runs again)."""
        return {str(r["id"]) for r in self.results if r.get("status") != "error"}


def _has_id(obj: Any) -> bool:
    task_id = obj.get("id") if isinstance(obj, dict) else None
    return isinstance(task_id, str | int) and not isinstance(task_id, bool)


def _is_result(obj: Any) -> bool:
    """Whether a decoded line is a results line: a JSON object with an ``id`` and a ``status``."""
    return _has_id(obj) and isinstance(obj.get("status"), str)


def _is_bank_line(obj: Any) -> bool:
    """Whether a decoded line is a sample bank's: a JSON object with an ``id`` and a ``samples`` list."""
    return _has_id(obj) and isinstance(obj.get("samples"), list)


@dataclass(frozen=True)
class LineKind:
    """What an appended JSONL file holds: how a line is recognised, and how the file is named."""

    accepts: Callable[[Any], bool]
    """Whether a decoded line is one of ours."""
    line: str
    """A line's name in messages (``result``)."""
    shape: str
    """The line's shape, for the error that refuses a file that is not ours."""
    what: str
    """The file's name in messages (``results file``)."""


RESULT_LINES = LineKind(_is_result, "result", "a JSON object with 'id' and 'status'", "results file")
"""The lines of ``retryctl batch`` and ``retryctl eval`` results."""
BANK_LINES = LineKind(_is_bank_line, "bank", "a JSON object with 'id' and 'samples'", "sample bank")
"""The lines of a sample bank that ``retryctl record`` appends to."""


def _looks_torn(tail: bytes, kind: LineKind) -> bool:
    """Whether bytes after the last newline look like a line of ``kind`` cut short (and may be cut)."""
    if not tail.startswith(b"{"):
        return False
    try:
        whole = json.loads(tail)
    except (ValueError, RecursionError):
        return True  # cut short, as expected
    return kind.accepts(whole)  # a line that lost only its newline; any other JSON is not ours


def read_results(path: str | os.PathLike[str], *, kind: LineKind = RESULT_LINES) -> ResultsState:
    """Read a results file (or another file of ``kind``); a missing file is empty. A file that is not
    one raises.

    Every complete line must be of ``kind``, and a torn tail must begin like one (``{``): otherwise a
    :class:`TaskFormatError` names the first line that is not, so that nothing is cut from a file
    that was never ours.
    """
    name = os.fspath(path)
    try:
        fd = open_regular(name, os.O_RDONLY, what=kind.what)
    except FileNotFoundError:
        return ResultsState(results=[], torn_bytes=0, valid_size=0)
    with open(fd, "rb") as f:
        data = f.read()
    lines = data.split(b"\n")
    tail = lines.pop()  # bytes after the last newline: empty unless the last line is torn
    results: list[dict[str, Any]] = []
    valid = 0
    for number, raw in enumerate(lines, start=1):
        try:
            obj = json.loads(raw)
        except (ValueError, RecursionError):  # RecursionError: nested too deeply to parse
            obj = None
        if not kind.accepts(obj):
            raise TaskFormatError(
                path=name,
                line=number,
                problem=f"not a {kind.line} line ({kind.shape}): not a retryctl {kind.what}",
            )
        results.append(obj)
        valid += len(raw) + 1
    if tail and not _looks_torn(tail, kind):
        raise TaskFormatError(
            path=name,
            line=len(lines) + 1,
            problem=(
                f"the last {len(tail)} bytes are not a complete line and do not begin like a "
                f"{kind.line}: not a retryctl {kind.what}"
            ),
        )
    return ResultsState(results=results, torn_bytes=len(tail), valid_size=valid)


class ResultsFile:
    """Appends one result line per finished task; cuts a torn last line when opened.

    ``kind`` says what lines the file holds (a sample bank's, for ``retryctl record``)."""

    def __init__(self, path: str | os.PathLike[str], *, kind: LineKind = RESULT_LINES) -> None:
        self.path = os.fspath(path)
        state = read_results(self.path, kind=kind)
        self.cut_bytes = state.torn_bytes
        """How many torn bytes were cut from the end when the file was opened."""
        flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT
        self._fd = open_regular(self.path, flags, 0o644, what=kind.what)
        if state.torn_bytes:
            os.ftruncate(self._fd, state.valid_size)
        self._size = state.valid_size if state.torn_bytes else os.fstat(self._fd).st_size
        self._write = os.write  # the one call that writes a line (a test injects a failing one)

    def append(self, result: dict[str, Any]) -> None:
        """Write ``result`` as one whole line; a failed write leaves the file as it was."""
        line = (json.dumps(result, ensure_ascii=False, sort_keys=True) + "\n").encode()
        if self._size < 0:
            raise OSError(
                f"{self.path}: an earlier write failed and its bytes could not be cut; not appending"
            )
        view = memoryview(line)
        try:
            while view:
                view = view[self._write(self._fd, view) :]
        except BaseException:
            try:
                os.ftruncate(self._fd, self._size)  # the batch is the only writer: these bytes are ours
            except OSError:
                self._size = -1
            raise
        self._size += len(line)

    def close(self) -> None:
        """Close the file. Idempotent."""
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
