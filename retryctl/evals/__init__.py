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
        fit_calibration,
        fit_curve,
        load_calibration,
        save_calibration,
        split_of,
    )
    from retryctl.evals._wordproblems import STRATA, WordProblem, word_problems

__all__ = [
    "STRATA",
    "Graded",
    "Outcome",
    "Scores",
    "WordProblem",
    "auroc",
    "brier",
    "ece",
    "fit_calibration",
    "fit_curve",
    "load_calibration",
    "reliability",
    "risk_coverage",
    "save_calibration",
    "scores",
    "split_of",
    "word_problems",
]

_MODULES = {
    **dict.fromkeys(
        ("Outcome", "fit_calibration", "fit_curve", "load_calibration", "save_calibration", "split_of"),
        "_fit",
    ),
    **dict.fromkeys(("STRATA", "WordProblem", "word_problems"), "_wordproblems"),
}
__getattr__, __dir__ = lazy_exports(globals(), _MODULES)
