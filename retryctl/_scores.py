"""How far a verdict's ``accept`` and its confidence can be trusted, measured on graded outcomes.

Pure functions of ``(confidence, correct, accepted)`` triples. The definitions are the usual ones of
selective prediction and calibration, written out so that a figure in a report can be checked by hand:

* **accuracy**: accepted and right, over all tasks (an abstention counts as not right);
* **coverage**: accepted, over all tasks;
* **accepted precision**: right, over accepted;
* **ungated accuracy**: right, over all tasks, whether accepted or not (what the answers would score if
  every abstention were answered anyway; for a baseline, which accepts everything, it is its accuracy);
* **ECE**: expected calibration error over *equal-mass* bins (each bin holds the same number of
  points, so a few confident outliers cannot hide in an empty-looking bin, and at least
  :data:`MIN_PER_BIN`), the gap between mean confidence and the share right, weighted by bin size;
* **Brier score**: mean squared gap between confidence and outcome (0 right, 1 wrong);
* **AUROC**: the chance that a right answer has a higher confidence than a wrong one (ties count half);
* **risk–coverage**: answering only the most confident, the share wrong at each coverage.

"All tasks" are the tasks with a gold answer. Every command that prints one of these figures (``batch``,
``eval``, ``audit``, ``bench``, ``sweep``) means this definition by this name (:data:`FIGURES`), and
prints it the same way: a fraction from 0 to 1 with three decimals, never a percent, in tables and JSON
alike (ECE, Brier and AUROC are fractions too, so one convention covers every figure).

Why by hand and not scikit-learn: these are a dozen lines each, and the project's core does not
depend on a machine-learning stack for them (the fit in :mod:`retryctl.evals._fit` uses SciPy).
Shared by the batch, the audit, the replay and the evaluation: public through :mod:`retryctl.evals`.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

__all__ = [
    "FIGURES",
    "LABELS",
    "MIN_PER_BIN",
    "MISSING",
    "Graded",
    "Scores",
    "auroc",
    "brier",
    "cell",
    "ece",
    "figure_rows",
    "reliability",
    "risk_coverage",
    "scores",
    "shares",
]

FIGURES = {
    "accuracy": "accepted and right / tasks with gold",
    "coverage": "accepted / tasks with gold",
    "accepted_precision": "right / accepted",
    "ungated_accuracy": "right, accepted or not / tasks with gold",
    "ece": "expected calibration error of the accepted answers' confidences (equal-mass bins)",
    "brier": "mean (confidence - outcome)^2 over every task",
    "auroc": "P(a right answer's confidence > a wrong one's) over every task",
}
"""Each figure's name and its one definition, as the commands' tables and ``--json`` use them."""

LABELS = {
    "accuracy": "accuracy",
    "coverage": "coverage",
    "accepted_precision": "accepted precision",
    "ungated_accuracy": "ungated accuracy",
    "ece": "ECE",
    "brier": "Brier",
    "auroc": "AUROC",
}
"""Each figure's label in every table (``batch``, ``eval``, ``audit``, ``bench``): one label per
``--json`` key of :data:`FIGURES`, so a column or row reads the same whichever command printed it."""

MISSING = "-"
"""What a table shows for an undefined figure (``null`` in ``--json``): no accepted answer for the
accepted precision, no right-and-wrong pair for the AUROC, no points for the ECE."""


def cell(value: float | None) -> str:
    """A figure as every table prints it: a fraction with three decimals, :data:`MISSING` if undefined."""
    return MISSING if value is None else f"{value:.3f}"


def figure_rows(figures: Mapping[str, float | int | None]) -> list[tuple[str, str]]:
    """``(label, cell)`` for each figure of :data:`FIGURES`, in its order: the rows of a figures table."""
    return [(LABELS[key], cell(figures.get(key))) for key in FIGURES]


def shares(*, n: int, accepted: int, accepted_right: int, right: int) -> dict[str, float | None]:
    """The share figures of :data:`FIGURES` from counts: ``n`` tasks with gold, ``accepted`` of them
    accepted, ``accepted_right`` accepted and right, ``right`` right whether accepted or not. The one
    place they are divided: the audit (which counts steps) and :func:`scores` both call it."""
    return {
        "accuracy": accepted_right / n if n else 0.0,
        "coverage": accepted / n if n else 0.0,
        "accepted_precision": accepted_right / accepted if accepted else None,
        "ungated_accuracy": right / n if n else 0.0,
    }


@dataclass(frozen=True)
class Graded:
    """One task's outcome: the confidence its verdict gave, whether the answer was right, whether it
    was accepted (a baseline that always answers accepts everything)."""

    confidence: float
    correct: bool
    accepted: bool = True
    stratum: str = ""


MIN_PER_BIN = 10
"""Points a bin holds at least: with fewer, a bin's share right is one or two outcomes, and the ECE of
one-point bins is the mean |confidence - outcome|, which no calibration can bring near 0. Ten bins
need 100 points; 7 accepted answers are one bin."""


def _bins(
    points: Sequence[tuple[float, bool]], count: int, min_per_bin: int = MIN_PER_BIN
) -> list[list[tuple[float, bool]]]:
    ordered = sorted(points, key=lambda p: p[0])
    count = max(1, min(count, len(ordered) // max(1, min_per_bin)))
    # Equal mass: bin k holds points [k*n/count, (k+1)*n/count), so sizes differ by at most one.
    edges = [round(k * len(ordered) / count) for k in range(count + 1)]
    return [ordered[edges[k] : edges[k + 1]] for k in range(count) if edges[k + 1] > edges[k]]


def ece(points: Sequence[tuple[float, bool]], bins: int = 10, min_per_bin: int = MIN_PER_BIN) -> float | None:
    """Expected calibration error over ``bins`` equal-mass bins of at least ``min_per_bin`` points
    (fewer bins when there are fewer points); ``None`` without points."""
    if not points:
        return None
    diagram = reliability(points, bins, min_per_bin)
    return sum(size / len(points) * abs(conf - right) for conf, right, size in diagram)


def reliability(
    points: Sequence[tuple[float, bool]], bins: int = 10, min_per_bin: int = MIN_PER_BIN
) -> list[tuple[float, float, int]]:
    """The reliability diagram's points: (mean confidence, share right, size) of each equal-mass bin."""
    out = []
    for group in _bins(points, bins, min_per_bin):
        mean_conf = math.fsum(c for c, _ in group) / len(group)
        out.append((mean_conf, sum(ok for _, ok in group) / len(group), len(group)))
    return out


def brier(points: Sequence[tuple[float, bool]]) -> float | None:
    """Mean of (confidence - outcome)²; ``None`` without points."""
    if not points:
        return None
    return math.fsum((c - float(ok)) ** 2 for c, ok in points) / len(points)


def auroc(points: Sequence[tuple[float, bool]]) -> float | None:
    """P(a right answer's confidence > a wrong one's), ties half; ``None`` unless both kinds occur.

    Mann-Whitney U over average ranks, O(n log n).
    """
    ordered = sorted(points, key=lambda p: p[0])
    right = sum(ok for _, ok in ordered)
    wrong = len(ordered) - right
    if right == 0 or wrong == 0:
        return None
    rank_sum = 0.0
    i = 0
    while i < len(ordered):
        j = i
        while j + 1 < len(ordered) and ordered[j + 1][0] == ordered[i][0]:
            j += 1
        mean_rank = (i + j) / 2 + 1  # ranks are 1-based; a tie shares their mean
        rank_sum += mean_rank * sum(ok for _, ok in ordered[i : j + 1])
        i = j + 1
    return (rank_sum - right * (right + 1) / 2) / (right * wrong)


def risk_coverage(points: Sequence[tuple[float, bool]]) -> list[tuple[float, float]]:
    """(coverage, risk) answering only the k most confident, for every k; ties enter together."""
    ordered = sorted(points, key=lambda p: -p[0])
    out: list[tuple[float, float]] = []
    wrong = 0
    for k, (conf, ok) in enumerate(ordered, start=1):
        wrong += not ok
        if k == len(ordered) or ordered[k][0] != conf:
            out.append((k / len(ordered), wrong / k))
    return out


@dataclass(frozen=True)
class Scores:
    """Every figure of one system (the agent, or a baseline) on one set of graded tasks."""

    n: int
    accuracy: float
    coverage: float
    accepted_precision: float | None
    ungated_accuracy: float
    """Right whether accepted or not, over all (see :data:`FIGURES`)."""
    ece: float | None
    """Of the accepted answers' confidences (what ``accept`` claims)."""
    ece_all: float | None
    """Of every task's confidence, abstentions included."""
    brier: float | None
    auroc: float | None
    risk_coverage: list[tuple[float, float]]
    reliability: list[tuple[float, float, int]]

    def summary(self) -> dict[str, float | int | None]:
        """The headline figures, for ``--json`` and tables."""
        return {
            "n": self.n,
            "accuracy": self.accuracy,
            "coverage": self.coverage,
            "accepted_precision": self.accepted_precision,
            "ungated_accuracy": self.ungated_accuracy,
            "ece": self.ece,
            "brier": self.brier,
            "auroc": self.auroc,
        }


def scores(graded: Iterable[Graded], bins: int = 10) -> Scores:
    """The figures of ``graded`` (empty gives zeros and ``None`` where a figure is undefined)."""
    rows = list(graded)
    n = len(rows)
    accepted = [(g.confidence, g.correct) for g in rows if g.accepted]
    everything = [(g.confidence, g.correct) for g in rows]
    share = shares(
        n=n,
        accepted=len(accepted),
        accepted_right=sum(ok for _, ok in accepted),
        right=sum(g.correct for g in rows),
    )
    return Scores(
        n=n,
        accuracy=share["accuracy"] or 0.0,
        coverage=share["coverage"] or 0.0,
        accepted_precision=share["accepted_precision"],
        ungated_accuracy=share["ungated_accuracy"] or 0.0,
        ece=ece(accepted, bins),
        ece_all=ece(everything, bins),
        brier=brier(everything),
        auroc=auroc(everything),
        risk_coverage=risk_coverage(everything),
        reliability=reliability(accepted, bins),
    )
