"""Reading decision-log lines as plain dicts, for ``--why`` stories and the reference analysis.

These readers need every field of a record (or are the reference path), so they decode each line
whole with ``orjson``; :func:`retryctl.report.analyse` reads typed records instead
(:mod:`retryctl.report._structs`). Both skip the pydantic models (validating a million records would
cost more than the whole analysis).
Integrity is :func:`retryctl.audit.verify_log`'s job; this reader only skips what it cannot decode,
counting it, so that a report on a damaged log still says what the readable part holds.

Field types are checked where the typed decoder already checks them: a line it refuses (a field of the
wrong type, such as ``"attempt": "one"``) is validated against the record models
(:func:`record_problem`) and, if they refuse it too, skipped and reported with its line and field
instead of being folded. Only such lines pay for the models, so a valid log costs nothing more.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator
from typing import Any

import msgspec

from retryctl._paths import open_regular

__all__ = ["LineDecoder", "iter_numbered_records", "iter_raw_records", "record_problem"]

LineDecoder = Callable[[bytes], Any]
"""Turns one line's bytes into a JSON value."""

_loads: LineDecoder
try:
    import orjson

    _loads = orjson.loads
except ImportError:  # pragma: no cover - orjson ships with LangGraph's dependencies
    _loads = json.loads

_READ_BUFFER = 1 << 20


def record_problem(obj: dict[str, Any]) -> str | None:
    """Why a line the typed decoder refused is not a valid record (its first bad field), or ``None``.

    The record models are imported on the first such line only: a valid log never loads them.
    """
    from retryctl.audit._records import record_problem as check

    return check(obj)


def iter_raw_records(
    path: str | os.PathLike[str],
    skipped: list[int] | None = None,
    invalid: list[tuple[int, str]] | None = None,
) -> Iterator[dict[str, Any]]:
    """Yield each line of ``path`` that decodes to a JSON object and is not an invalid record.

    The 1-based numbers of lines that do not decode (a torn tail, garbage) are appended to
    ``skipped`` when it is given; ``(number, problem)`` of records with a field of the wrong type
    (see :func:`record_problem`) to ``invalid``. The typed decoder of the fast path decides which
    lines are checked, so that both paths skip the same lines.
    """
    for _, obj in iter_numbered_records(path, skipped, invalid):
        yield obj


def iter_numbered_records(
    path: str | os.PathLike[str],
    skipped: list[int] | None = None,
    invalid: list[tuple[int, str]] | None = None,
    *,
    check: bool = True,
) -> Iterator[tuple[int, dict[str, Any]]]:
    """:func:`iter_raw_records`, each record with its 1-based line number; ``check=False`` yields
    every JSON object, invalid records included (for a caller that validates them itself)."""
    from retryctl.report._structs import decoder

    typed = decoder.decode
    loads = _loads
    with open(open_regular(path, os.O_RDONLY, what="decision log"), "rb", buffering=_READ_BUFFER) as f:
        for number, line in enumerate(f, start=1):
            try:
                obj = loads(line)
            except ValueError:
                if skipped is not None and line.strip():
                    skipped.append(number)
                continue
            if not isinstance(obj, dict):
                if skipped is not None:
                    skipped.append(number)
                continue
            if check:
                try:
                    typed(line)
                except msgspec.DecodeError:
                    problem = record_problem(obj)
                    if problem is not None:
                        if invalid is not None:
                            invalid.append((number, problem))
                        continue
            yield number, obj
