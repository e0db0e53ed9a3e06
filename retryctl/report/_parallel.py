"""Verifying large logs in a second process while this one analyses them.

Verification (hashing every byte) and analysis (decoding every record) each take seconds on a log of a
million records and share nothing, so on a machine with a spare core the audit runs them side by side:
:func:`start_verification` forks a worker for the hash chains and returns a function that waits for its
reports. Small logs, or a machine with one core, are verified in this process (a fork costs more than
it saves there).
"""

from __future__ import annotations

import multiprocessing
import os
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor

from retryctl.audit import VerifyReport, verify_log
from retryctl.exceptions import LogIntegrityError

__all__ = ["PARALLEL_MIN_BYTES", "start_verification"]

PARALLEL_MIN_BYTES = 64 << 20
"""Below this many bytes of logs in all, verification runs in this process."""

_Plain = tuple[str, bool, int, int, str, tuple[int, int, str] | None]


def _verify_plain(paths: Sequence[str]) -> list[_Plain]:
    """Verify in the worker; return plain tuples (the error's keyword-only constructor does not pickle)."""
    out: list[_Plain] = []
    for path in paths:
        r = verify_log(path)
        err = None if r.error is None else (r.error.line, r.error.index, r.error.problem)
        out.append((r.path, r.ok, r.records, r.runs, r.head, err))
    return out


def _rebuild(plain: _Plain) -> VerifyReport:
    path, ok, records, runs, head, err = plain
    error = None if err is None else LogIntegrityError(path=path, line=err[0], index=err[1], problem=err[2])
    return VerifyReport(path=path, ok=ok, records=records, runs=runs, head=head, error=error)


def start_verification(
    paths: Sequence[str], *, min_bytes: int = PARALLEL_MIN_BYTES
) -> Callable[[], list[VerifyReport]]:
    """Start verifying ``paths``; the returned function gives the reports (in order) when done."""
    total = sum(os.path.getsize(p) for p in paths)
    if (
        total < min_bytes
        or (os.cpu_count() or 1) < 2
        or "fork" not in multiprocessing.get_all_start_methods()
    ):
        reports = [verify_log(p) for p in paths]
        return lambda: reports
    pool = ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("fork"))
    future = pool.submit(_verify_plain, list(paths))

    def result() -> list[VerifyReport]:
        try:
            return [_rebuild(p) for p in future.result()]
        finally:
            pool.shutdown()

    return result
