"""Fitting a :class:`~retryctl.controller.Calibration` on graded outcomes, and its file.

The map is isotonic regression (pool-adjacent-violators) of the outcome on the raw fused confidence:
the most that can be assumed of a raw confidence is that a higher one is not *less* likely right, and
isotonic regression uses exactly that and nothing more (Platt's sigmoid or a beta map assume a
shape). It is SciPy's ``scipy.optimize.isotonic_regression``, a kept, tested implementation; only the
shrinkage around it is ours. Each pooled block's share right is pulled towards one half by one
outcome of each kind (Laplace's rule), so a block of five right answers says 0.86, not 1.0: a small
block is weak evidence, and a calibrated confidence of exactly 1 would be a promise.

**Equal weight per stratum** (``balance_strata``, the default). The decision points of a graded run
are not one per task: a hard task ends in more verdicts (refines, switches) than an easy one, and a
development set's mix of difficulties is not a user's. Pooled point by point, a fit learns mostly the
hard strata, where the model is weak, and its map then silences the model where it is strong (the
lesson of ``retryctl calibrate --shift``). So each stratum weighs the same in the fit, each task the
same within its stratum, and each point the same within its task: the map is one that no single
difficulty dominates. Without strata (or with one) this is one weight per task. The weights are
scaled to a mean of 1, so the shrinkage still counts outcomes.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from pydantic import ValidationError

from retryctl.controller import Calibration, CalibrationCurve
from retryctl.controller._calibration import ANY_MEMBER
from retryctl.exceptions import ConfigError, MissingExtra

_NO_SCIPY: ModuleNotFoundError | None = None
try:
    import numpy as np
    from scipy.optimize import isotonic_regression
except ModuleNotFoundError as exc:  # the `calibration` extra: only the fit needs it, not the file
    _NO_SCIPY = exc

__all__ = [
    "MIN_FIT_POINTS",
    "NOT_A_CALIBRATION",
    "Outcome",
    "balanced_weights",
    "fit_calibration",
    "fit_curve",
    "load_calibration",
    "save_calibration",
    "split_of",
]

MIN_MEMBER_OUTCOMES = 30
"""A member gets a curve of its own only with at least this many graded outcomes; the rest share ``*``."""

MIN_FIT_POINTS = 50
"""``retryctl calibrate`` warns when it fits on fewer decision points: five equal-mass bins of
:data:`retryctl._scores.MIN_PER_BIN` (10) each. Below it the fitted curve's steps are a handful of
outcomes each (one more right answer moves a step by a tenth or more), and the held-out part that
tests it (30 % by default: under 20 points) is one or two bins, so its ECE says little either way."""


@dataclass(frozen=True)
class Outcome:
    """One graded decision point: the raw fused confidence of an answer, who served it, and whether it
    was right."""

    raw: float
    correct: bool
    member: str | None = None
    task: str = ""
    """The task it came from: the split keeps a task's points together."""
    stratum: str = ""
    """The task's difficulty stratum (``""``: none given)."""


def balanced_weights(outcomes: Sequence[Outcome]) -> list[float]:
    """A weight per outcome: strata equal, tasks equal within a stratum, points equal within a task;
    scaled to a mean of 1 (see the module docstring)."""
    if not outcomes:
        return []
    tasks_of: dict[str, set[str]] = {}
    points_of: dict[tuple[str, str], int] = {}
    for o in outcomes:
        tasks_of.setdefault(o.stratum, set()).add(o.task)
        points_of[(o.stratum, o.task)] = points_of.get((o.stratum, o.task), 0) + 1
    raw = [
        1.0 / (len(tasks_of) * len(tasks_of[o.stratum]) * points_of[(o.stratum, o.task)]) for o in outcomes
    ]
    scale = len(outcomes) / sum(raw)
    return [w * scale for w in raw]


def fit_curve(
    raw: Sequence[float], correct: Sequence[bool], weights: Sequence[float] | None = None
) -> CalibrationCurve:
    """The isotonic, Laplace-shrunk curve of ``correct`` on ``raw`` (see the module docstring);
    ``weights`` (default: 1 each) say how much each outcome counts."""
    if len(raw) != len(correct):
        raise ValueError(f"{len(raw)} confidences but {len(correct)} outcomes")
    if weights is not None and len(weights) != len(raw):
        raise ValueError(f"{len(raw)} confidences but {len(weights)} weights")
    if not raw:
        raise ValueError("no graded outcomes to fit on")
    if _NO_SCIPY is not None:  # `retryctl eval --calibration FILE` reads a file without it
        raise MissingExtra(
            feature="fitting a calibration", extra="calibration", module=_NO_SCIPY.name
        ) from _NO_SCIPY
    xs = np.asarray(raw, dtype=float)
    ys = np.asarray(correct, dtype=float)
    ws = np.ones_like(xs) if weights is None else np.asarray(weights, dtype=float)
    # One point per distinct raw value, weighted by the outcomes that share it.
    knots, inverse = np.unique(xs, return_inverse=True)
    counts = np.bincount(inverse, weights=ws, minlength=len(knots))
    rights = np.bincount(inverse, weights=ys * ws, minlength=len(knots))
    fitted = isotonic_regression(rights / counts, weights=counts, increasing=True).x
    # The blocks PAV pooled are the runs of equal fitted values: shrink each by its whole size.
    shrunk = np.empty_like(fitted)
    start = 0
    for end in range(1, len(fitted) + 1):
        if end == len(fitted) or fitted[end] != fitted[start]:
            size = counts[start:end].sum()
            shrunk[start:end] = (fitted[start] * size + 1.0) / (size + 2.0)
            start = end
    # Shrinking blocks of different sizes can reverse two of them; the running maximum restores order.
    shrunk = np.maximum.accumulate(shrunk)
    return CalibrationCurve(
        raw=tuple(float(x) for x in knots),
        calibrated=tuple(float(min(1.0, max(0.0, y))) for y in shrunk),
        n=len(raw),
    )


def fit_calibration(
    outcomes: Sequence[Outcome], *, source: str = "", balance_strata: bool = True
) -> Calibration:
    """A curve for every member with :data:`MIN_MEMBER_OUTCOMES` outcomes, and ``*`` over all of them;
    with ``balance_strata``, weighted by :func:`balanced_weights` (else one weight per outcome)."""

    def curve(part: Sequence[Outcome]) -> CalibrationCurve:
        weights = balanced_weights(part) if balance_strata else None
        return fit_curve([o.raw for o in part], [o.correct for o in part], weights)

    curves = {ANY_MEMBER: curve(outcomes)}
    members = sorted({o.member for o in outcomes if o.member})
    for member in members:
        own = [o for o in outcomes if o.member == member]
        if len(own) >= MIN_MEMBER_OUTCOMES:
            curves[member] = curve(own)
    return Calibration(
        curves=curves,
        source=source or f"{len(outcomes)} graded outcomes",
        method=(
            "isotonic regression (scipy.optimize.isotonic_regression) of correct on the raw fused "
            "confidence, each pooled block shrunk by Laplace's rule; one curve per member with "
            f"at least {MIN_MEMBER_OUTCOMES} outcomes, '*' over all"
            + ("; strata weighted equally, tasks equally within them" if balance_strata else "")
        ),
    )


def split_of(task: str, holdout: float, seed: int = 0) -> bool:
    """Whether ``task`` is in the held-out part: a hash of its id, so the split is the same on every
    run and machine, and a task's points never straddle it."""
    digest = hashlib.sha256(f"{seed}:{task}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64 < holdout


NOT_A_CALIBRATION = (
    "not a calibration file: retryctl calibrate writes one, a JSON object with 'curves' (per member: "
    "'raw' and 'calibrated' confidences), 'source' and 'method'"
)
"""What a file that is not a calibration (a task or result file, JSONL) is told."""


def save_calibration(calibration: Calibration, path: Path) -> None:
    """Write the file whole or not at all (a temporary file, then a rename)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(calibration.model_dump(mode="json"), indent=1) + "\n", encoding="utf-8")
    os.replace(tmp, path)


def load_calibration(path: str | os.PathLike[str]) -> Calibration:
    """Read a calibration file; a :class:`ConfigError` naming the file and the bad field otherwise."""
    where = os.fspath(path)
    try:
        text = Path(where).read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(
            field="calibration", value=where, problem=f"cannot be read ({exc.strerror})"
        ) from None
    try:
        return Calibration.model_validate_json(text)
    except ValidationError as exc:
        first = exc.errors()[0]
        at = ".".join(str(p) for p in first["loc"]) or "the file"
        if first["type"] in ("json_invalid", "model_type") or (at == "curves" and first["type"] == "missing"):
            # Not one JSON object with curves (a task or result file, JSONL): no field to name in it.
            raise ConfigError(field="calibration", value=where, problem=NOT_A_CALIBRATION) from None
        raise ConfigError(field="calibration", value=where, problem=f"{at}: {first['msg']}") from None
