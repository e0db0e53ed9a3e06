"""Graded evaluation: how far a verdict's ``accept`` and its confidence can be trusted.

The metrics (accuracy, coverage, accepted precision, ECE, Brier, AUROC, risk–coverage), the fit of a
calibration and its file, and the project's own development set of word problems. Imported on first
use: the fit needs SciPy, which ``retryctl bench`` and ``retryctl batch`` (they use the metrics) do not.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from retryctl._lazy import lazy_exports
from retryctl._scores import Graded, Scores, auroc, brier, ece, reliability, risk_coverage, scores

if TYPE_CHECKING:
    from retryctl.evals._fit import (
        Outcome,
        balanced_weights,
        fit_calibration,
        fit_curve,
        load_calibration,
        save_calibration,
        split_of,
    )
    from retryctl.evals._frontier import oracle_rows, precision_at, selective
    from retryctl.evals._heldout import HELDOUT_STRATUM, heldout_problems
    from retryctl.evals._problem import WordProblem
    from retryctl.evals._transfer import by_stratum, transfer
    from retryctl.evals._wordproblems import STRATA, word_problems

__all__ = [
    "HELDOUT_STRATUM",
    "STRATA",
    "Graded",
    "Outcome",
    "Scores",
    "WordProblem",
    "auroc",
    "balanced_weights",
    "brier",
    "by_stratum",
    "ece",
    "fit_calibration",
    "fit_curve",
    "heldout_problems",
    "load_calibration",
    "oracle_rows",
    "precision_at",
    "reliability",
    "risk_coverage",
    "save_calibration",
    "scores",
    "selective",
    "split_of",
    "transfer",
    "word_problems",
]

_MODULES = {
    **dict.fromkeys(
        (
            "Outcome",
            "balanced_weights",
            "fit_calibration",
            "fit_curve",
            "load_calibration",
            "save_calibration",
            "split_of",
        ),
        "_fit",
    ),
    **dict.fromkeys(("oracle_rows", "precision_at", "selective"), "_frontier"),
    **dict.fromkeys(("HELDOUT_STRATUM", "heldout_problems"), "_heldout"),
    **dict.fromkeys(("by_stratum", "transfer"), "_transfer"),
    **dict.fromkeys(("STRATA", "word_problems"), "_wordproblems"),
    "WordProblem": "_problem",
}
__getattr__, __dir__ = lazy_exports(globals(), _MODULES)
