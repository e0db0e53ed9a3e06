"""Reading one part of a log once: each line decoded for the fold and checked for the chain.

Reading a line costs little next to hashing it and decoding it, and both are needed: so
:func:`scan_part` reads each line of a part once (``mmap``), decodes it into a typed record
(:mod:`retryctl.report._structs`) for the fold (:mod:`retryctl.report._fold`) and hands the same
bytes, a batch at a time with their decoded links (``prev_hash``, ``schema``, ``hash``, ``run_id``),
to the audit package's own chain check (:func:`retryctl.audit.check_chain`, the walk
:func:`retryctl.audit.verify_log` makes), so that the problem a part reports is worded as
``verify_log`` words it. The hash-line layout lives in ``retryctl.audit``; nothing here knows it.

A part may start in the middle of a log (the second part of a two-process audit,
:mod:`retryctl.report._audit`): its walk then starts from its first record's ``prev_hash``, and the
join checks that this is the head the first part ended on. When a second part's first line does not
link by itself (it does not decode, or the check refuses it), the part is marked incomplete and the
join walks it again from the first part's head.
"""

from __future__ import annotations

import mmap
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import msgspec

from retryctl.audit import GENESIS_HASH, check_chain
from retryctl.report._charges import Pending
from retryctl.report._fold import fold_records
from retryctl.report._load import record_problem
from retryctl.report._model import Analysis
from retryctl.report._structs import LeanRecord, Record, decode_fallback, decoder, lean_decoder

__all__ = ["Part", "fold_span", "note_skipped", "scan_part", "span_lines"]

_BATCH = 256
"""Records folded, and lines checked, at a time."""


def span_lines(path: str, start: int, end: int) -> Iterator[bytes]:
    """The lines of ``path`` from byte ``start`` (a line start) to byte ``end``."""
    if end <= start:
        return iter(())
    with open(path, "rb") as f:
        base = start - start % mmap.ALLOCATIONGRANULARITY
        try:
            m = mmap.mmap(f.fileno(), end - base, offset=base, access=mmap.ACCESS_READ)
        except (OSError, ValueError):  # not a regular file, or it shrank
            return _read_lines(path, start, end)
    m.seek(start - base)
    return iter(m.readline, b"")


def _read_lines(path: str, start: int, end: int) -> Iterator[bytes]:
    with open(path, "rb", buffering=1 << 20) as f:
        if start:
            f.seek(start)
        at = start
        for line in f:
            if at >= end:
                return
            at += len(line)
            yield line[: len(line) - max(0, at - end)]


@dataclass(kw_only=True)
class Part:
    """What one part's pass found."""

    lines: int = 0
    """Lines read."""
    skipped: list[int] = field(default_factory=list)
    """Line numbers (1-based, within the part) that did not decode to a JSON object."""
    invalid: list[tuple[int, str]] = field(default_factory=list)
    """``(line, problem)`` of records skipped for a field of the wrong type (``record_problem``)."""
    verified: int = 0
    """Records whose links were checked before the first problem (or before the check stopped)."""
    head: str | None = None
    """The hash of the last record verified (for the second part, first its first ``prev_hash``)."""
    first_prev: str | None = None
    """The ``prev_hash`` the part's first record links to (``None``: the check could not start)."""
    problem: str | None = None
    """The first problem, worded as ``verify_log`` words it."""
    complete: bool = True
    """Whether the chain check covered the whole part (else the exact walk must redo it)."""
    run_keys: set[bytes] = field(default_factory=set)
    """Run ids of the records verified, JSON-encoded (as :func:`retryctl.audit.check_chain` keeps them)."""


def scan_part(  # noqa: PLR0915 - the hot loop, inlined on purpose
    path: str,
    start: int,
    end: int,
    *,
    first: bool,
    out: Analysis,
    pending: Pending,
    verify: bool = True,
    full: bool = True,
) -> Part:
    """Fold the records of one part of ``path`` and, if ``verify``, check its chain.

    ``first``: the part starts the log (its first record links to the genesis hash).
    ``full=False``: fold only what the summary reads (see :func:`~retryctl.report._fold.fold_records`).
    """
    part = Part()
    decode = decoder.decode if full else lean_decoder.decode
    decode_error = msgspec.DecodeError
    skipped_append = part.skipped.append
    batch: list[Any] = []
    batch_append = batch.append
    lines: list[bytes] = []
    lines_append = lines.append
    links: list[Record | LeanRecord | None] = []  # the lines' decoded fields, for the chain check
    links_append = links.append
    expected: str | None = GENESIS_HASH if first else None
    part.head = expected
    # The walk's index: the check words "expected the genesis hash" only at index 0, which a second
    # part never is.
    start_index = index = 0 if first else 1
    verifying = verify
    number = 0
    for line in span_lines(path, start, end):
        number += 1
        rec: Record | LeanRecord | None
        try:
            rec = decode(line)
        except decode_error:
            rec = None
        if rec is not None and not line.isascii():
            try:
                line.decode()
            except UnicodeDecodeError:
                rec = None  # orjson refuses the line; so does the plain path
        if rec is None:
            obj = decode_fallback(line)
            if obj is None:
                if line.strip():
                    skipped_append(number)
            else:
                problem = record_problem(obj)
                if problem is None:
                    batch_append(obj)
                else:
                    part.invalid.append((number, problem))
        else:
            batch_append(rec)
        if len(batch) >= _BATCH:
            fold_records(batch, out, pending, full=full)
            batch.clear()
        if not verifying:
            continue
        if expected is None:
            # A second part's first line: the walk starts from its prev_hash, which the join checks.
            prev = None if rec is None else rec.prev_hash
            if not isinstance(prev, str):
                part.complete = verifying = False
                continue
            expected = part.first_prev = part.head = prev
        lines_append(line)
        links_append(rec)
        if len(lines) >= _BATCH:
            verifying, expected, index = _check(
                part, lines, links, expected=expected, index=index, start_index=start_index
            )
            lines.clear()
            links.clear()
    if batch:
        fold_records(batch, out, pending, full=full)
    if lines and verifying and expected is not None:
        verifying, expected, index = _check(
            part, lines, links, expected=expected, index=index, start_index=start_index
        )
    part.lines = number
    part.verified = index - start_index
    if part.complete:
        part.head = expected
    return part


def _check(
    part: Part,
    lines: list[bytes],
    links: list[Record | LeanRecord | None],
    *,
    expected: str,
    index: int,
    start_index: int,
) -> tuple[bool, str, int]:
    """Walk the chain over a batch of the part's lines; whether to go on, the head and the index."""
    scan = check_chain(lines, after=expected, index=index, run_keys=part.run_keys, decoded=links)
    if scan.problem is None:
        return True, scan.head, scan.records
    if scan.records == start_index and start_index:
        # A second part whose first line does not link by itself: the join walks the part again.
        part.first_prev = None
        part.complete = False
    else:
        part.problem = scan.problem
    return False, scan.head, scan.records


def note_skipped(out: Analysis, path: str, line_offset: int, part: Part) -> None:
    """Add the lines ``part`` skipped to ``out``, numbered in the whole file."""
    out.undecodable_lines.extend(f"{path}:{line_offset + n}" for n in part.skipped)
    out.invalid_records.extend(f"{path}:{line_offset + n}: {problem}" for n, problem in part.invalid)


def fold_span(
    path: str, start: int, end: int, out: Analysis, *, line_offset: int = 0, full: bool = True
) -> None:
    """Fold the records of ``path`` between two line starts into ``out`` (no chain check)."""
    pending = Pending()
    part = scan_part(path, start, end, first=False, out=out, pending=pending, verify=False, full=full)
    pending.apply(out)
    note_skipped(out, path, line_offset, part)
