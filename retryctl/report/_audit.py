"""Auditing one log in one pass: its chain checked and its records folded, two processes for a large one.

:func:`audit_log` and :func:`audit_summary` are the entry points, and this module owns their
processes. The log is read up to its size when the audit starts (writers append whole lines under a
lock, so a partial last line there is a torn tail) and cut at a line start where a new step begins;
this process scans the first part (:func:`retryctl.report._scan.scan_part`), a forked worker the
second, and the two are joined:

- **chain**: each part checks its own links, the second from its first record's ``prev_hash``; the
  join checks that this is the first part's head. The first problem in file order wins, named by
  its line in the whole file. A second part whose first line does not link by itself is walked
  again here from the first part's head (:func:`retryctl.audit.check_chain`), so that the report is
  the one :func:`retryctl.audit.verify_log` gives.
- **analysis**: the worker's fold is handed over and added after this one's
  (:mod:`retryctl.report._handover`). When a step has records in both parts (or the worker folded a
  line as a dict), this process folds the second part again itself, after the first: slower, and
  the same result.
"""

from __future__ import annotations

import contextlib
import fcntl
import multiprocessing
import os
import signal
from collections.abc import Callable
from typing import Any, NoReturn, TypeVar

import msgspec

from retryctl.audit import VerifyReport, check_chain, settled_size
from retryctl.exceptions import LogIntegrityError
from retryctl.report._charges import Pending
from retryctl.report._handover import merge, pack, unpack, unpack_steps, unpack_totals
from retryctl.report._model import PARALLEL_MIN_BYTES, Analysis, no_cyclic_gc
from retryctl.report._scan import Part, fold_span, note_skipped, scan_part, span_lines
from retryctl.report._summary import sections
from retryctl.report._totals import StepTotals

__all__ = ["AuditSummary", "audit_log", "audit_summary"]

_T = TypeVar("_T")
_PIPE_BYTES = 1 << 20  # Linux's default ceiling for an unprivileged process (/proc/sys/fs/pipe-max-size)
_FIRST_SHARE = 0.5
"""The first part's share of the bytes: this process also joins the parts and summarises."""
_BOUNDARY_LINES = 10_000


class AuditSummary(tuple[VerifyReport, dict[str, Any]]):
    """``(report, summary)``, as :func:`audit_summary` gives them, holding what they were built from.

    The steps, totals and charges of a million-record audit are a few million objects, and freeing
    them takes a tenth of a second or more. They go when this result goes, not when
    :func:`audit_summary` returns: a caller that ends its process without freeing anything
    (``retryctl audit``, see :mod:`retryctl.cli._ending`) keeps the result to the end and never pays
    for it; any other caller frees them with the result, as usual.
    """

    built: tuple[object, ...]
    """The large objects the summary was built from."""


def _summary(report: VerifyReport, summary: dict[str, Any], *built: object) -> AuditSummary:
    result = AuditSummary((report, summary))
    result.built = built
    return result


class _Key(msgspec.Struct, gc=False):
    kind: Any = None
    run_id: Any = ""
    step_id: Any = ""


_key_decode = msgspec.json.Decoder(_Key).decode


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


def _report(path: str, problem: str | None, records: int, runs: int, head: str) -> VerifyReport:
    error = None
    if problem is not None:
        error = LogIntegrityError(path=path, line=records + 1, index=records, problem=problem)
    return VerifyReport(path=path, ok=error is None, records=records, runs=runs, head=head, error=error)


def _join_chain(path: str, first: Part, second: Part | None, mid: int, end: int) -> VerifyReport:
    assert first.head is not None
    if first.problem is not None or second is None:
        return _report(path, first.problem, first.verified, len(first.run_keys), first.head)
    if second.complete and second.first_prev == first.head:
        head = second.head if second.verified else first.head
        assert head is not None
        runs = len(first.run_keys | second.run_keys)
        return _report(path, second.problem, first.verified + second.verified, runs, head)
    # The second part's start does not link (or could not be checked): walk it from the first's head.
    scan = check_chain(
        span_lines(path, mid, end), after=first.head, index=first.verified, run_keys=set(first.run_keys)
    )
    return _report(path, scan.problem, scan.records, scan.runs, scan.head)


def _here(
    path: str, start: int, end: int, out: Analysis, *, first: bool, line_offset: int = 0, full: bool = True
) -> Part:
    """Check and fold one part in this process, into ``out`` (after what it already holds)."""
    pending = Pending()
    part = scan_part(path, start, end, first=first, out=out, pending=pending, full=full)
    pending.apply(out)
    note_skipped(out, path, line_offset, part)
    return part


def _worker(  # pragma: no cover - in the child
    path: str, mid: int, end: int, write_fd: int, *, totals: bool
) -> NoReturn:
    # The worker ends with os._exit, without freeing what it built (it was forked: its heap is a copy
    # of this process's, and nothing in it waits for an exit handler).
    code = 1
    try:
        second, pending = Analysis(), Pending()
        part = scan_part(path, mid, end, first=False, out=second, pending=pending, full=not totals)
        with os.fdopen(write_fd, "wb") as pipe:
            pipe.write(pack(second, part, pending, totals=totals))
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
) -> tuple[Part, _T, bytes | None]:
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
    second, part2, pending2, tail = unpack(payload)
    unpack_steps(second, pending2, tail)
    report = _join_chain(path, part1, part2, mid, end)
    if pending2.mixed or not second.steps.keys().isdisjoint(out.steps):
        fold_span(path, mid, end, out, line_offset=part1.lines)
    else:
        merge(out, second, pending2)
        note_skipped(out, path, part1.lines, part2)
    return report


def _two_parts_summary(path: str, mid: int, end: int, out: Analysis) -> AuditSummary:
    pid, read_fd = _fork_second(path, mid, end, totals=True)
    # This part's totals are taken while the worker still folds or totals its own.
    part1, totals, payload = _first_then_wait(
        path, mid, pid, read_fd, out, then=lambda: StepTotals.of(out.steps.values()), full=False
    )
    if payload is None:
        # The worker failed: do its part here, after the first (which is the plain order anyway).
        part2 = _here(path, mid, end, out, first=False, line_offset=part1.lines, full=False)
        report = _join_chain(path, part1, part2, mid, end)
        return _summary(report, sections(out, StepTotals.of(out.steps.values())), out)
    second, part2, pending2, tail = unpack(payload)
    report = _join_chain(path, part1, part2, mid, end)
    later = None if pending2.mixed else unpack_totals(tail, out)
    if later is None:
        # Its totals cannot be added to these: fold its part here, after this one, and total it all.
        fold_span(path, mid, end, out, line_offset=part1.lines, full=False)
        return _summary(report, sections(out, StepTotals.of(out.steps.values())), out, totals, pending2)
    merge(out, second, pending2)
    note_skipped(out, path, part1.lines, part2)
    totals.extend(later)
    return _summary(report, sections(out, totals), out, totals, later, pending2)


def _plan(path: str, min_bytes: int, first_share: float) -> tuple[int, int]:
    """The size of the log as it is now, and where the second part starts (``end``: one part)."""
    with open(path, "rb") as f:
        end = settled_size(f.fileno())
    two = (
        end >= min_bytes and (os.cpu_count() or 1) >= 2 and "fork" in multiprocessing.get_all_start_methods()
    )
    return end, _step_boundary(path, int(end * first_share), end) if two else end


def audit_summary(
    path: str, *, min_bytes: int = PARALLEL_MIN_BYTES, first_share: float = _FIRST_SHARE
) -> AuditSummary:
    """:func:`audit_log`, then :func:`~retryctl.report.summarise`, for when only the summary is needed.

    In two processes, each totals its own part's steps (:class:`~retryctl.report._totals.StepTotals`)
    and the worker hands over the totals instead of the steps: the summary is the same, and both the
    handover and the summary's pass over the steps take half the time or less. The result unpacks as
    ``report, summary`` (see :class:`AuditSummary` for what else it holds).
    """
    end, mid = _plan(path, min_bytes, first_share)
    out = Analysis(paths=[path])
    with no_cyclic_gc():
        if mid >= end:
            report = _join_chain(path, _here(path, 0, end, out, first=True, full=False), None, end, end)
            return _summary(report, sections(out, StepTotals.of(out.steps.values())), out)
        return _two_parts_summary(path, mid, end, out)


def audit_log(
    path: str, *, min_bytes: int = PARALLEL_MIN_BYTES, first_share: float = _FIRST_SHARE
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
