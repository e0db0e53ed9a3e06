"""Reading decision-log lines as plain dicts, for ``--why`` stories and the reference analysis.

These readers need every field of a record (or are the reference path), so they decode each line
whole with ``orjson``; :func:`retryctl.report.analyse` reads typed records instead
(:mod:`retryctl.report._structs`). Both skip the pydantic models (validating a million records would
cost more than the whole analysis).
Integrity is :func:`retryctl.audit.verify_log`'s job; this reader only skips what it cannot decode,
counting it, so that a report on a damaged log still says what the readable part holds.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator
from typing import Any

__all__ = ["LineDecoder", "iter_raw_records"]

LineDecoder = Callable[[bytes], Any]
"""Turns one line's bytes into a JSON value."""

_loads: LineDecoder
try:
    import orjson

    _loads = orjson.loads
except ImportError:  # pragma: no cover - orjson ships with LangGraph's dependencies
    _loads = json.loads

_READ_BUFFER = 1 << 20


def iter_raw_records(
    path: str | os.PathLike[str], skipped: list[int] | None = None
) -> Iterator[dict[str, Any]]:
    """Yield each line of ``path`` that decodes to a JSON object, in file order.

    The 1-based numbers of lines that do not decode (a torn tail, garbage) are appended to
    ``skipped`` when it is given.
    """
    loads = _loads
    with open(os.fspath(path), "rb", buffering=_READ_BUFFER) as f:
        for number, line in enumerate(f, start=1):
            try:
                obj = loads(line)
            except ValueError:
                if skipped is not None and line.strip():
                    skipped.append(number)
                continue
            if isinstance(obj, dict):
                yield obj
            elif skipped is not None:
                skipped.append(number)
