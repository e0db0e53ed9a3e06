"""Auditing one large log in one pass, its two halves in two processes.

Reading a line costs little next to hashing it and decoding it, and both are needed: so each line is
read once, hashed for the chain and decoded (typed, :mod:`retryctl.report._structs`) for the fold
(:mod:`retryctl.report._fold`). The log is cut at a line start; this process takes the first part,
a forked worker the second, and the two are joined:

- **chain**: each part checks its own links, the second from its first record's ``prev_hash``; the
  join checks that this is the first part's head. The first problem in file order wins, named by
  its line in the whole file. Whatever the fast check cannot settle by itself (a line in the sorted
  layout, a damaged line, a second part whose first line does not link) is handed to the exact walk
  of :func:`retryctl.audit.verify_log` (``_scan``), resumed where the fast check stopped, so
  that the report is the one ``verify_log`` gives. The log is read up to its size when the audit
  starts (writers append whole lines under a lock, so a partial last line there is a torn tail).
- **analysis**: the second part's fold is added after the first's: counts and counters add up, its
  steps follow the first part's, and the costs it charges are added one by one after the first
  part's (:meth:`~retryctl.report._fold.Pending.apply`), which gives the same float sums. When a
  step has records in both parts (or the worker folded a line as a dict), this process folds the
  second part again itself, after the first: slower, and the same result.

The fast chain check reads ``prev_hash``, ``schema`` and ``hash`` as decoded, and the hash on the raw
bytes of the hash-last layout; a line another tool laid out differently goes to the exact walk.
"""

from __future__ import annotations

import hashlib
import json
import mmap
import multiprocessing
import os
import pickle
import signal
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, NoReturn

import msgspec

from retryctl.audit import VerifyReport
from retryctl.audit._canonical import GENESIS_HASH
from retryctl.audit._reader import _scan, _settled_size
from retryctl.exceptions import LogIntegrityError
from retryctl.report._analysis import Analysis, StepOutcome, no_cyclic_gc
from retryctl.report._fold import Pending, fold_records
from retryctl.report._structs import Record, decode_fallback, decoder

__all__ = ["audit_log", "fold_span", "span_lines"]

_SUFFIX = b',"hash":"'
_SUFFIX_LEN = len(_SUFFIX) + 64 + 3
_EMPTY_RUN = b'"run_id":""'
_BATCH = 256
_FIRST_SHARE = 0.43
"""The first part's share of the bytes: this process also joins the parts and summarises."""


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
class _Part:
    """What one part's pass found."""

    lines: int = 0
    """Lines read."""
    skipped: list[int] = field(default_factory=list)
    """Line numbers (1-based, within the part) that did not decode to a JSON object."""
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
    runs: set[str] = field(default_factory=set)
    """Run ids of the records verified."""
    run_keys: set[bytes] = field(default_factory=set)
    """Run ids found by the exact walk, JSON-encoded."""


def _scan_part(  # noqa: PLR0915 - the hot loop, inlined on purpose
    path: str, start: int, end: int, *, first: bool, out: Analysis, pending: Pending, verify: bool = True
) -> _Part:
    """Fold the records of one part of ``path`` and, if ``verify``, check its chain."""
    part = _Part()
    sha256 = hashlib.sha256
    decode = decoder.decode
    decode_error = msgspec.DecodeError
    skipped_append = part.skipped.append
    runs_add = part.runs.add
    batch: list[Any] = []
    batch_append = batch.append
    expected: str | None = GENESIS_HASH if first else None
    part.head = expected
    # The exact walk words "expected the genesis hash" only at index 0, which a second part never is.
    index_base = 0 if first else 1
    verifying = verify
    verified = 0
    last_run: str | None = None
    number = 0
    for line in span_lines(path, start, end):
        number += 1
        rec: Record | None
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
                batch_append(obj)
        else:
            batch_append(rec)
        if len(batch) >= _BATCH:
            fold_records(batch, out, pending)
            batch.clear()
        if not verifying:
            continue
        if rec is not None:
            if expected is None:
                prev = rec.prev_hash
                expected = part.first_prev = part.head = prev if isinstance(prev, str) else None
            cut = len(line) - _SUFFIX_LEN
            if (
                cut > 0
                and rec.prev_hash == expected
                and line.startswith(_SUFFIX, cut)
                and line.endswith(b'"}\n')
                and type(rec.schema) is int
                and rec.schema == 1
            ):
                computed = sha256(line[:cut] + b"}").hexdigest()
                if rec.hash == computed:
                    expected = computed
                    verified += 1
                    run = rec.run_id
                    if run != last_run and (run or _EMPTY_RUN in line):
                        runs_add(run)
                        last_run = run
                    continue
        if expected is None or (not first and verified == 0):
            # A second part whose first line the fast check cannot settle: the exact walk redoes it.
            part.first_prev = None
            part.complete = False
            verifying = False
            continue
        scan = _scan(
            (line,), None, expected_hash=expected, start_index=index_base + verified, run_keys=part.run_keys
        )
        if scan.problem is not None:
            part.problem = scan.problem
            verifying = False
        else:
            expected = scan.head
            verified += 1
            last_run = None
    if batch:
        fold_records(batch, out, pending)
    part.lines = number
    part.verified = verified
    if part.complete:
        part.head = expected
    return part


def _runs(part: _Part) -> set[str]:
    return part.runs | {json.loads(k) for k in part.run_keys}


class _Key(msgspec.Struct, gc=False):
    kind: Any = None
    run_id: Any = ""
    step_id: Any = ""


_key_decode = msgspec.json.Decoder(_Key).decode
_BOUNDARY_LINES = 10_000


def _step_boundary(path: str, offset: int, end: int) -> int:
    """A line start at or after ``offset`` where a new step begins (the parts then share no step).

    In a log whose steps are written one after the other, that is the first record after ``offset``
    whose step differs from the record's before it; past a few thousand lines without one (steps
    interleaved), the first line start.
    """
    if offset <= 0:
        return 0
    with open(path, "rb") as f:
        f.seek(offset - 1)
        first = offset - 1 + len(f.readline())
        at, previous = first, None
        for _ in range(_BOUNDARY_LINES):
            if at >= end:
                return end
            line = f.readline()
            try:
                rec = _key_decode(line)
            except msgspec.DecodeError:
                rec = None
            if rec is not None and rec.kind in ("verdict", "summary"):
                key = (rec.run_id, rec.step_id)
                if previous is not None and key != previous:
                    return at
                previous = key
            at += len(line)
    return min(first, end)


def _pack(out: Analysis, part: _Part, pending: Pending) -> bytes:
    """The worker's result: its steps as msgpack arrays (quick both ways), the rest pickled."""
    try:
        steps = msgspec.msgpack.encode(list(out.steps.values()))
    except (TypeError, OverflowError):  # a value msgpack cannot carry: the parent folds the part again
        steps = b""
    out.steps = {}
    rest = pickle.dumps((out, part, pending.samples, pending.usd, pending.mixed), pickle.HIGHEST_PROTOCOL)
    return len(rest).to_bytes(8, "little") + rest + steps


_steps_decode = msgspec.msgpack.Decoder(list[StepOutcome]).decode


def _unpack(payload: bytes) -> tuple[Analysis, _Part, Pending]:
    size = int.from_bytes(payload[:8], "little")
    out, part, samples, usd, mixed = pickle.loads(payload[8 : 8 + size])
    pending = Pending()
    pending.samples, pending.usd, pending.mixed = samples, usd, mixed
    try:
        steps = _steps_decode(payload[8 + size :])
    except msgspec.DecodeError:  # a value of an odd type, folded from a dict: fold the part again
        pending.mixed = True
        steps = []
    out.steps = {(s.run_id, s.step_id): s for s in steps}
    return out, part, pending


def _merge(out: Analysis, second: Analysis, pending: Pending) -> None:
    """Add the second part's fold to the first's (their steps are disjoint)."""
    out.records += second.records
    out.verdict_records += second.verdict_records
    out.summary_records += second.summary_records
    out.repair_records += second.repair_records
    out.runs |= second.runs
    out.steps.update(second.steps)
    out.actions.update(second.actions)
    out.error_classes.update(second.error_classes)
    out.transitions.update(second.transitions)
    out.target_attempts.update(second.target_attempts)
    out.tools |= second.tools
    out.confidence_hist = [a + b for a, b in zip(out.confidence_hist, second.confidence_hist, strict=True)]
    pending.apply(out)
    room = max(0, 40 - len(out.token_rows))
    out.token_rows.extend(second.token_rows[:room])


def fold_span(path: str, start: int, end: int, out: Analysis, *, line_offset: int = 0) -> None:
    """Fold the records of ``path`` between two line starts into ``out`` (no chain check)."""
    pending = Pending()
    part = _scan_part(path, start, end, first=False, out=out, pending=pending, verify=False)
    pending.apply(out)
    out.undecodable_lines.extend(f"{path}:{line_offset + n}" for n in part.skipped)


def _report(path: str, problem: str | None, records: int, runs: set[str], head: str) -> VerifyReport:
    error = None
    if problem is not None:
        error = LogIntegrityError(path=path, line=records + 1, index=records, problem=problem)
    return VerifyReport(path=path, ok=error is None, records=records, runs=len(runs), head=head, error=error)


def _join_chain(path: str, first: _Part, second: _Part | None, mid: int, end: int) -> VerifyReport:
    assert first.head is not None
    if first.problem is not None or second is None:
        return _report(path, first.problem, first.verified, _runs(first), first.head)
    if second.complete and second.first_prev == first.head:
        problem = second.problem
        head = second.head if second.verified else first.head
        assert head is not None
        return _report(path, problem, first.verified + second.verified, _runs(first) | _runs(second), head)
    # The second part's start does not link (or could not be checked): walk it exactly.
    keys = {json.dumps(r, ensure_ascii=False).encode() for r in _runs(first)}
    scan = _scan(
        span_lines(path, mid, end), None, expected_hash=first.head, start_index=first.verified, run_keys=keys
    )
    return _report(path, scan.problem, scan.records, {json.loads(k) for k in scan.run_keys}, scan.head)


def _here(path: str, start: int, end: int, out: Analysis, *, first: bool, line_offset: int = 0) -> _Part:
    """Check and fold one part in this process, into ``out`` (after what it already holds)."""
    pending = Pending()
    part = _scan_part(path, start, end, first=first, out=out, pending=pending)
    pending.apply(out)
    out.undecodable_lines.extend(f"{path}:{line_offset + n}" for n in part.skipped)
    return part


def _worker(path: str, mid: int, end: int, write_fd: int) -> NoReturn:  # pragma: no cover - in the child
    code = 1
    try:
        second, pending = Analysis(), Pending()
        part = _scan_part(path, mid, end, first=False, out=second, pending=pending)
        with os.fdopen(write_fd, "wb") as pipe:
            pipe.write(_pack(second, part, pending))
        code = 0
    finally:
        os._exit(code)


def _two_parts(path: str, mid: int, end: int, out: Analysis) -> VerifyReport:
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the worker (its result is checked by the parent's tests)
        os.close(read_fd)
        _worker(path, mid, end, write_fd)
    os.close(write_fd)
    try:
        part1 = _here(path, 0, mid, out, first=True)
        with os.fdopen(read_fd, "rb") as pipe:
            payload = pipe.read()
    except BaseException:  # interrupted: do not leave the worker running
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        raise
    _, status = os.waitpid(pid, 0)
    if status != 0 or not payload:
        # The worker failed: do its part here, after the first (which is the plain order anyway).
        part2 = _here(path, mid, end, out, first=False, line_offset=part1.lines)
        return _join_chain(path, part1, part2, mid, end)
    second, part2, pending2 = _unpack(payload)
    report = _join_chain(path, part1, part2, mid, end)
    if pending2.mixed or not second.steps.keys().isdisjoint(out.steps):
        fold_span(path, mid, end, out, line_offset=part1.lines)
    else:
        _merge(out, second, pending2)
        out.undecodable_lines.extend(f"{path}:{part1.lines + n}" for n in part2.skipped)
    return report


def audit_log(
    path: str, *, min_bytes: int = 64 << 20, first_share: float = _FIRST_SHARE
) -> tuple[VerifyReport, Analysis]:
    """Verify ``path``'s chain and analyse it in one pass, in two processes when it has ``min_bytes``.

    The report is the one :func:`retryctl.audit.verify_log` gives (without an anchor), and the analysis
    the one :func:`retryctl.report.analyse` gives, for the log as it was when this started.
    ``first_share`` is the part of the bytes this process takes (it also joins the parts).
    """
    with open(path, "rb") as f:
        end = _settled_size(f.fileno())
    out = Analysis(paths=[path])
    two = (
        end >= min_bytes and (os.cpu_count() or 1) >= 2 and "fork" in multiprocessing.get_all_start_methods()
    )
    mid = _step_boundary(path, int(end * first_share), end) if two else end
    with no_cyclic_gc():
        if mid >= end:
            return _join_chain(path, _here(path, 0, end, out, first=True), None, end, end), out
        return _two_parts(path, mid, end, out), out
