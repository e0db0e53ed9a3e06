"""Analysing whole logs in this process: :func:`analyse` (the fast path) and its reference.

:func:`analyse` reads each log once with the scanner (:mod:`retryctl.report._scan`: typed records,
folded by :func:`~retryctl.report._fold.fold_records`), without the chain check, which is
:func:`retryctl.audit.verify_log`'s job (or the audit's one pass, :mod:`retryctl.report._audit`).
:func:`analyse_plain` is the reference the fast path must agree with (every line decoded to a dict
and folded by :func:`~retryctl.report._fold.fold_dicts`), and :func:`analyse_records` folds records a
caller decoded itself.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import Any

from retryctl.report._fold import fold_dicts
from retryctl.report._load import iter_raw_records
from retryctl.report._model import Analysis, no_cyclic_gc
from retryctl.report._scan import fold_span

__all__ = ["analyse", "analyse_plain", "analyse_records"]


def analyse(paths: Iterable[str | os.PathLike[str]]) -> Analysis:
    """Read every log in ``paths`` (in order) into one :class:`~retryctl.report.Analysis`.

    Lines are decoded selectively into typed records and folded by the fast fold;
    :func:`analyse_plain` is the reference it must agree with.
    """
    result = Analysis()
    with no_cyclic_gc():
        for path in paths:
            name = os.fspath(path)
            result.paths.append(name)
            fold_span(name, 0, os.path.getsize(name), result)
    return result


def analyse_plain(paths: Iterable[str | os.PathLike[str]]) -> Analysis:
    """:func:`analyse` by the reference path: every line decoded to a dict and folded by ``fold_dicts``."""
    result = Analysis()
    for path in paths:
        name = os.fspath(path)
        result.paths.append(name)
        skipped: list[int] = []
        invalid: list[tuple[int, str]] = []
        analyse_records(iter_raw_records(name, skipped, invalid), into=result)
        result.undecodable_lines.extend(f"{name}:{n}" for n in skipped)
        result.invalid_records.extend(f"{name}:{n}: {problem}" for n, problem in invalid)
    return result


def analyse_records(records: Iterable[dict[str, Any]], *, into: Analysis | None = None) -> Analysis:
    """Fold decoded records into ``into`` (a new :class:`~retryctl.report.Analysis` if ``None``) and
    return it."""
    out = Analysis() if into is None else into
    with no_cyclic_gc():
        fold_dicts(records, out)
    return out
