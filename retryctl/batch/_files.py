"""The batch's two files: the task list it reads and the results file it appends to.

Tasks are JSONL, one ``{"id", "question", "gold"?}`` object a line; blank lines are skipped and any
other malformed line is a :class:`TaskFormatError` naming the file and line.

Results are JSONL too, one object per finished task, each line written whole by one ``os.write`` on a
descriptor opened with ``O_APPEND`` and ended by a newline. A crash can therefore leave at most one
torn last line (no newline, or not JSON): :func:`read_results` finds it, and :class:`ResultsFile`
cuts it before appending, so the task it belonged to simply runs again on ``--resume``.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Any

from retryctl.exceptions import TaskFormatError

__all__ = ["ResultsFile", "ResultsState", "Task", "TaskFormatError", "load_tasks", "read_results"]


@dataclass(frozen=True, kw_only=True)
class Task:
    """One task of a batch."""

    id: str
    """Unique within the task file; the key ``--resume`` matches results on."""
    question: str
    """What the graph is asked."""
    gold: str | None = None
    """The right answer, when known (then the summary reports accuracy)."""


def load_tasks(path: str | os.PathLike[str]) -> list[Task]:
    """Every task of a JSONL task file, in order; a malformed line raises :class:`TaskFormatError`."""
    name = os.fspath(path)
    tasks: list[Task] = []
    seen: dict[str, int] = {}
    with open(name, encoding="utf-8") as f:
        for number, line in enumerate(f, start=1):
            if not line.strip():
                continue

            def bad(problem: str, number: int = number) -> TaskFormatError:
                return TaskFormatError(path=name, line=number, problem=problem)

            try:
                obj = json.loads(line)
            except ValueError as exc:
                raise bad(f"not JSON: {exc}") from exc
            if not isinstance(obj, dict):
                raise bad("a task must be a JSON object with 'id' and 'question'")
            task_id, question, gold = obj.get("id"), obj.get("question"), obj.get("gold")
            if not isinstance(task_id, str | int) or isinstance(task_id, bool) or str(task_id) == "":
                raise bad(f"'id' must be a non-empty string or an integer, got {task_id!r}")
            if not isinstance(question, str) or not question.strip():
                raise bad(f"'question' must be a non-empty string, got {question!r}")
            if gold is not None and not isinstance(gold, str | int | float):
                raise bad(f"'gold' must be a string or a number, got {gold!r}")
            key = str(task_id)
            if key in seen:
                raise bad(f"duplicate id {key!r} (first on line {seen[key]})")
            seen[key] = number
            tasks.append(Task(id=key, question=question, gold=None if gold is None else str(gold)))
    return tasks


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


def read_results(path: str | os.PathLike[str]) -> ResultsState:
    """Read a results file; a missing file is empty. A malformed line before the last one raises."""
    name = os.fspath(path)
    try:
        with open(name, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        return ResultsState(results=[], torn_bytes=0, valid_size=0)
    lines = data.split(b"\n")
    tail = lines.pop()  # bytes after the last newline: empty unless the last line is torn
    results: list[dict[str, Any]] = []
    valid = 0
    torn = len(tail)
    for number, raw in enumerate(lines, start=1):
        try:
            obj = json.loads(raw)
        except ValueError:
            obj = None
        if not isinstance(obj, dict) or "id" not in obj:
            if number == len(lines) and not tail:
                # A last line that ends in a newline but is not a result: torn the same way.
                torn = len(raw) + 1
                break
            raise TaskFormatError(path=name, line=number, problem="not a result line (JSON object with 'id')")
        results.append(obj)
        valid += len(raw) + 1
    return ResultsState(results=results, torn_bytes=torn, valid_size=valid)


class ResultsFile:
    """Appends one result line per finished task; cuts a torn last line when opened."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = os.fspath(path)
        state = read_results(self.path)
        self.cut_bytes = state.torn_bytes
        """How many torn bytes were cut from the end when the file was opened."""
        self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o644)
        if state.torn_bytes:
            os.ftruncate(self._fd, state.valid_size)

    def append(self, result: dict[str, Any]) -> None:
        """Write ``result`` as one whole line."""
        line = (json.dumps(result, ensure_ascii=False, sort_keys=True) + "\n").encode()
        view = memoryview(line)
        while view:
            view = view[os.write(self._fd, view) :]

    def close(self) -> None:
        """Close the file. Idempotent."""
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
