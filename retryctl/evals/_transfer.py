"""Calibration across difficulty: ECE per stratum, and under shift (fit on some strata, test on others).

A calibration fitted where the model is weak says little where it is strong: a map learnt on
three-step problems, where a high vote share is still often wrong, pulls every confidence down and
silences the model on one-step problems it gets right. One ECE over a mixed held-out set hides that;
these figures show it. Each split fits on the decision points of some strata and scores the map on
the points of the others, never on a point it was fitted on:

* **leave one stratum out**, for every stratum: the strata a deployment's mix might lack;
* **hard → easy** and **easy → hard**: the strata in order of difficulty (:data:`STRATA`, easiest
  first), split in two halves; the harshest shifts.

Both fits are scored: the one ``retryctl calibrate`` writes (strata weighted equally,
:func:`~retryctl.evals.balanced_weights`) and the plain pooled one, so that a reader sees whether the
weighting helps on this data. Pure: outcomes in, figures out; the fit is passed in.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from retryctl._scores import ece
from retryctl.controller import Calibration
from retryctl.evals._fit import Outcome, fit_calibration
from retryctl.evals._wordproblems import STRATA

__all__ = ["Shift", "by_stratum", "ordered_strata", "shifts", "transfer"]

Fit = Callable[[Sequence[Outcome], bool], Calibration]
"""``(outcomes, balance_strata) -> Calibration``: :func:`fit_calibration` unless a test passes another."""


def _fit(outcomes: Sequence[Outcome], balance_strata: bool) -> Calibration:
    return fit_calibration(outcomes, balance_strata=balance_strata)


def ordered_strata(outcomes: Sequence[Outcome]) -> list[str]:
    """The strata present, easiest first: those of :data:`STRATA` in its order, then others by name."""
    present = {o.stratum for o in outcomes if o.stratum}
    known = [s for s in STRATA if s in present]
    return known + sorted(present - set(known))


def _figures(points: Sequence[Outcome], calibration: Calibration) -> dict[str, Any]:
    return {
        "points": len(points),
        "tasks": len({o.task for o in points}),
        "ece_raw": ece([(o.raw, o.correct) for o in points]),
        "ece_calibrated": ece([(calibration(o.raw, o.member), o.correct) for o in points]),
    }


def by_stratum(points: Sequence[Outcome], calibration: Calibration) -> dict[str, dict[str, Any]]:
    """Per stratum (easiest first, then ``"all"``): points, tasks, ECE of the raw and of the calibrated
    confidence. ECE bins hold at least 10 points, so a small stratum's figure is coarse."""
    out = {s: _figures([o for o in points if o.stratum == s], calibration) for s in ordered_strata(points)}
    if points:
        out["all"] = _figures(points, calibration)
    return out


@dataclass(frozen=True)
class Shift:
    """One split: fit on ``fit_on``, test on ``test_on``."""

    name: str
    fit_on: tuple[str, ...]
    test_on: tuple[str, ...]


def shifts(strata: Sequence[str]) -> list[Shift]:
    """Leave each stratum out, then hard → easy and easy → hard (``strata`` easiest first; an odd one
    in the middle goes with the hard half). None with fewer than two strata; a split that repeats an
    earlier one is left out."""
    if len(strata) < 2:
        return []
    out = [Shift(f"leave out {s}", tuple(x for x in strata if x != s), (s,)) for s in strata]
    half = len(strata) // 2
    easy, hard = tuple(strata[:half]), tuple(strata[half:])
    for shift in (Shift("hard -> easy", hard, easy), Shift("easy -> hard", easy, hard)):
        if all((s.fit_on, s.test_on) != (shift.fit_on, shift.test_on) for s in out):
            out.append(shift)
    return out


def transfer(outcomes: Sequence[Outcome], *, fit: Fit = _fit) -> list[dict[str, Any]]:
    """Every split of :func:`shifts` over the strata of ``outcomes``: what it fitted on and tested on,
    ECE raw, calibrated (strata weighted equally) and calibrated by the pooled fit, overall and per
    tested stratum."""
    rows: list[dict[str, Any]] = []
    for shift in shifts(ordered_strata(outcomes)):
        train = [o for o in outcomes if o.stratum in shift.fit_on]
        test = [o for o in outcomes if o.stratum in shift.test_on]
        balanced, pooled = fit(train, True), fit(train, False)
        figures = _figures(test, balanced)
        rows.append(
            {
                "name": shift.name,
                "fit_on": list(shift.fit_on),
                "test_on": list(shift.test_on),
                "fitted_on": len(train),
                "tested_on": len(test),
                "ece_raw": figures["ece_raw"],
                "ece_calibrated": figures["ece_calibrated"],
                "ece_pooled_fit": _figures(test, pooled)["ece_calibrated"],
                "by_stratum": by_stratum(test, balanced),
            }
        )
    return rows
