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
from retryctl.report._model import PARALLEL_MIN_BYTES

__all__ = ["start_verification"]


def _verify_all(paths: Sequence[str]) -> list[VerifyReport]:
    """Verify in the worker; the reports (and a broken chain's error) cross back pickled."""
    return [verify_log(path) for path in paths]


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
    future = pool.submit(_verify_all, list(paths))

    def result() -> list[VerifyReport]:
        try:
            return future.result()
        finally:
            pool.shutdown()

    return result
