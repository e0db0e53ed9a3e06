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

import contextlib
import fcntl
import hashlib
import json
import mmap
import multiprocessing
import os
import pickle
import signal
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, NoReturn, TypeVar

import msgspec

from retryctl.audit import VerifyReport
from retryctl.audit._canonical import GENESIS_HASH
from retryctl.audit._reader import _scan, _settled_size
from retryctl.exceptions import LogIntegrityError
from retryctl.report._analysis import Analysis, StepOutcome, no_cyclic_gc
from retryctl.report._fold import Pending, fold_records
from retryctl.report._load import record_problem
from retryctl.report._structs import LeanRecord, Record, decode_fallback, decoder, lean_decoder
from retryctl.report._summary import sections
from retryctl.report._totals import StepTotals

__all__ = ["audit_log", "audit_summary", "fold_span", "span_lines"]

_T = TypeVar("_T")
_SUFFIX = b',"hash":"'
_SUFFIX_LEN = len(_SUFFIX) + 64 + 3
_EMPTY_RUN = b'"run_id":""'
_BATCH = 256
_PIPE_BYTES = 1 << 20  # Linux's default ceiling for an unprivileged process (/proc/sys/fs/pipe-max-size)
_FIRST_SHARE = 0.5
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
    runs: set[str] = field(default_factory=set)
    """Run ids of the records verified."""
    run_keys: set[bytes] = field(default_factory=set)
    """Run ids found by the exact walk, JSON-encoded."""


def _scan_part(  # noqa: PLR0915 - the hot loop, inlined on purpose
    path: str,
    start: int,
    end: int,
    *,
    first: bool,
    out: Analysis,
    pending: Pending,
    verify: bool = True,
    full: bool = True,
) -> _Part:
    """Fold the records of one part of ``path`` and, if ``verify``, check its chain.

    ``full=False``: fold only what the summary reads (see :func:`~retryctl.report._fold.fold_records`).
    """
    part = _Part()
    sha256 = hashlib.sha256
    decode = decoder.decode if full else lean_decoder.decode
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
        fold_records(batch, out, pending, full=full)
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


class _TotalsOut(msgspec.Struct, array_like=True, gc=False):
    """What a worker that totals its steps hands over besides its record-level counts."""

    totals: StepTotals
    step_ids: dict[str, list[str]]
    """Its steps' ids by run, to check that the parts share no step."""


class _TotalsIn(msgspec.Struct, array_like=True, gc=False):
    totals: StepTotals
    step_ids: dict[str, msgspec.Raw]
    """Decoded only for the runs both parts have (usually one, where the log was cut)."""


def _pack(out: Analysis, part: _Part, pending: Pending, *, totals: bool = False) -> bytes:
    """The worker's result: its steps as msgpack arrays (quick both ways), or with ``totals`` only
    their totals (:class:`StepTotals`) and ids, the rest pickled."""
    try:
        if not totals:
            tail = msgspec.msgpack.encode(list(out.steps.values()))
        elif pending.mixed:
            tail = b""  # the parent folds this part again, steps and all
        else:
            step_ids: dict[str, list[str]] = {}
            for run_id, step_id in out.steps:
                ids = step_ids.get(run_id)
                if ids is None:
                    step_ids[run_id] = [step_id]
                else:
                    ids.append(step_id)
            tail = msgspec.msgpack.encode(_TotalsOut(StepTotals.of(out.steps.values()), step_ids))
    except (TypeError, OverflowError):  # a value msgpack cannot carry: the parent folds the part again
        tail = b""
    # The steps travel in the tail; they are put back rather than dropped, because freeing a few
    # hundred thousand objects takes a tenth of a second, and the worker exits without freeing.
    steps, out.steps = out.steps, {}
    rest = pickle.dumps((out, part, pending.samples, pending.usd, pending.mixed), pickle.HIGHEST_PROTOCOL)
    out.steps = steps
    return len(rest).to_bytes(8, "little") + rest + tail


_steps_decode = msgspec.msgpack.Decoder(list[StepOutcome]).decode
_totals_decode = msgspec.msgpack.Decoder(_TotalsIn).decode
_ids_decode = msgspec.msgpack.Decoder(list[str]).decode


def _unpack(payload: bytes) -> tuple[Analysis, _Part, Pending, bytes]:
    """The worker's counts, chain check and charges; and the tail (steps or totals) still encoded."""
    size = int.from_bytes(payload[:8], "little")
    out, part, samples, usd, mixed = pickle.loads(payload[8 : 8 + size])
    pending = Pending()
    pending.samples, pending.usd, pending.mixed = samples, usd, mixed
    return out, part, pending, payload[8 + size :]


def _unpack_steps(out: Analysis, pending: Pending, tail: bytes) -> None:
    try:
        steps = _steps_decode(tail)
    except msgspec.DecodeError:  # a value of an odd type, folded from a dict: fold the part again
        pending.mixed = True
        steps = []
    out.steps = {(s.run_id, s.step_id): s for s in steps}


def _unpack_totals(tail: bytes, first: Analysis) -> StepTotals | None:
    """The worker's totals, or ``None`` when they cannot be added to ``first``'s (a step in both parts,
    or nothing handed over): the part must then be folded again here."""
    try:
        got = _totals_decode(tail)
    except msgspec.DecodeError:
        return None
    steps = first.steps
    for run_id in got.step_ids.keys() & first.runs:
        if any((run_id, step_id) in steps for step_id in _ids_decode(got.step_ids[run_id])):
            return None
    return got.totals


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


def fold_span(
    path: str, start: int, end: int, out: Analysis, *, line_offset: int = 0, full: bool = True
) -> None:
    """Fold the records of ``path`` between two line starts into ``out`` (no chain check)."""
    pending = Pending()
    part = _scan_part(path, start, end, first=False, out=out, pending=pending, verify=False, full=full)
    pending.apply(out)
    _note_skipped(out, path, line_offset, part)


def _note_skipped(out: Analysis, path: str, line_offset: int, part: _Part) -> None:
    """Add the lines ``part`` skipped to ``out``, numbered in the whole file."""
    out.undecodable_lines.extend(f"{path}:{line_offset + n}" for n in part.skipped)
    out.invalid_records.extend(f"{path}:{line_offset + n}: {problem}" for n, problem in part.invalid)


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


def _here(
    path: str, start: int, end: int, out: Analysis, *, first: bool, line_offset: int = 0, full: bool = True
) -> _Part:
    """Check and fold one part in this process, into ``out`` (after what it already holds)."""
    pending = Pending()
    part = _scan_part(path, start, end, first=first, out=out, pending=pending, full=full)
    pending.apply(out)
    _note_skipped(out, path, line_offset, part)
    return part


def _worker(  # pragma: no cover - in the child
    path: str, mid: int, end: int, write_fd: int, *, totals: bool
) -> NoReturn:
    code = 1
    try:
        second, pending = Analysis(), Pending()
        part = _scan_part(path, mid, end, first=False, out=second, pending=pending, full=not totals)
        with os.fdopen(write_fd, "wb") as pipe:
            pipe.write(_pack(second, part, pending, totals=totals))
        code = 0
    finally:
        os._exit(code)


def _fork_second(path: str, mid: int, end: int, *, totals: bool) -> tuple[int, int]:
    """Start the worker on the second part; its pid and the pipe its result comes through."""
    read_fd, write_fd = os.pipe()
    with contextlib.suppress(OSError):  # a larger buffer: the result (megabytes) crosses in fewer turns
        fcntl.fcntl(write_fd, fcntl.F_SETPIPE_SZ, _PIPE_BYTES)
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the worker (its result is checked by the parent's tests)
        os.close(read_fd)
        _worker(path, mid, end, write_fd, totals=totals)
    os.close(write_fd)
    return pid, read_fd


def _first_then_wait(
    path: str, mid: int, pid: int, read_fd: int, out: Analysis, *, then: Callable[[], _T], full: bool
) -> tuple[_Part, _T, bytes | None]:
    """Do the first part here, then ``then()``, then collect the worker's payload (``None``: it failed)."""
    try:
        part1 = _here(path, 0, mid, out, first=True, full=full)
        done = then()
        with os.fdopen(read_fd, "rb") as pipe:
            payload = pipe.read()
    except BaseException:  # interrupted: do not leave the worker running
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        raise
    _, status = os.waitpid(pid, 0)
    return part1, done, payload if status == 0 and payload else None


def _two_parts(path: str, mid: int, end: int, out: Analysis) -> VerifyReport:
    pid, read_fd = _fork_second(path, mid, end, totals=False)
    part1, _, payload = _first_then_wait(path, mid, pid, read_fd, out, then=lambda: None, full=True)
    if payload is None:
        # The worker failed: do its part here, after the first (which is the plain order anyway).
        part2 = _here(path, mid, end, out, first=False, line_offset=part1.lines)
        return _join_chain(path, part1, part2, mid, end)
    second, part2, pending2, tail = _unpack(payload)
    _unpack_steps(second, pending2, tail)
    report = _join_chain(path, part1, part2, mid, end)
    if pending2.mixed or not second.steps.keys().isdisjoint(out.steps):
        fold_span(path, mid, end, out, line_offset=part1.lines)
    else:
        _merge(out, second, pending2)
        _note_skipped(out, path, part1.lines, part2)
    return report


def _two_parts_summary(
    path: str, mid: int, end: int, out: Analysis, keep: list[object]
) -> tuple[VerifyReport, dict[str, Any]]:
    pid, read_fd = _fork_second(path, mid, end, totals=True)
    # This part's totals are taken while the worker still folds or totals its own.
    part1, totals, payload = _first_then_wait(
        path, mid, pid, read_fd, out, then=lambda: StepTotals.of(out.steps.values()), full=False
    )
    if payload is None:
        # The worker failed: do its part here, after the first (which is the plain order anyway).
        part2 = _here(path, mid, end, out, first=False, line_offset=part1.lines, full=False)
        return _join_chain(path, part1, part2, mid, end), sections(out, StepTotals.of(out.steps.values()))
    second, part2, pending2, tail = _unpack(payload)
    report = _join_chain(path, part1, part2, mid, end)
    later = None if pending2.mixed else _unpack_totals(tail, out)
    keep += (totals, later, pending2)
    if later is None:
        # Its totals cannot be added to these: fold its part here, after this one, and total it all.
        fold_span(path, mid, end, out, line_offset=part1.lines, full=False)
        return report, sections(out, StepTotals.of(out.steps.values()))
    _merge(out, second, pending2)
    _note_skipped(out, path, part1.lines, part2)
    totals.extend(later)
    return report, sections(out, totals)


def _plan(path: str, min_bytes: int, first_share: float) -> tuple[int, int]:
    """The size of the log as it is now, and where the second part starts (``end``: one part)."""
    with open(path, "rb") as f:
        end = _settled_size(f.fileno())
    two = (
        end >= min_bytes and (os.cpu_count() or 1) >= 2 and "fork" in multiprocessing.get_all_start_methods()
    )
    return end, _step_boundary(path, int(end * first_share), end) if two else end


def audit_summary(
    path: str,
    *,
    min_bytes: int = 64 << 20,
    first_share: float = _FIRST_SHARE,
    keep: list[object] | None = None,
) -> tuple[VerifyReport, dict[str, Any]]:
    """:func:`audit_log`, then :func:`~retryctl.report.summarise`, for when only the summary is needed.

    In two processes, each totals its own part's steps (:class:`~retryctl.report._totals.StepTotals`)
    and the worker hands over the totals instead of the steps: the summary is the same, and both the
    handover and the summary's pass over the steps take half the time or less.

    ``keep``, if given, receives the large objects built on the way instead of their being freed on
    return (a tenth of a second for a million records): for a caller about to exit without freeing
    anything, as ``retryctl audit`` does.
    """
    end, mid = _plan(path, min_bytes, first_share)
    out = Analysis(paths=[path])
    if keep is None:
        keep = []
    keep.append(out)
    with no_cyclic_gc():
        if mid >= end:
            report = _join_chain(path, _here(path, 0, end, out, first=True, full=False), None, end, end)
            return report, sections(out, StepTotals.of(out.steps.values()))
        return _two_parts_summary(path, mid, end, out, keep)


def audit_log(
    path: str, *, min_bytes: int = 64 << 20, first_share: float = _FIRST_SHARE
) -> tuple[VerifyReport, Analysis]:
    """Verify ``path``'s chain and analyse it in one pass, in two processes when it has ``min_bytes``.

    The report is the one :func:`retryctl.audit.verify_log` gives (without an anchor), and the analysis
    the one :func:`retryctl.report.analyse` gives, for the log as it was when this started.
    ``first_share`` is the part of the bytes this process takes (it also joins the parts).
    """
    end, mid = _plan(path, min_bytes, first_share)
    out = Analysis(paths=[path])
    with no_cyclic_gc():
        if mid >= end:
            return _join_chain(path, _here(path, 0, end, out, first=True), None, end, end), out
        return _two_parts(path, mid, end, out), out
