"""A calibration: a monotone map from a raw fused confidence to the probability that the answer is right.

A fused confidence is a weighted mean of signals; nothing makes 0.9 of it mean "right nine times in
ten". A calibration fitted on graded outcomes (``retryctl calibrate``) does: ``Policy(calibration=...)``
compares the *calibrated* confidence with the accept threshold, and every verdict's evidence keeps
both. The map is held as knots of a piecewise-linear, non-decreasing curve, one curve per member of
the group that served the answer where the fit had enough of that member's outcomes (a 0.9 from a
model's own votes and a 0.9 from a calculator's are different evidence), and a curve for the rest.

Pure data and arithmetic: the fit (SciPy) and the file live in :mod:`retryctl.evals`.
"""

from __future__ import annotations

import bisect
import math

from pydantic import BaseModel, ConfigDict, Field, model_validator

__all__ = ["Calibration", "CalibrationCurve"]

ANY_MEMBER = "*"
"""The key of the curve for members without a curve of their own."""


class CalibrationCurve(BaseModel):
    """A non-decreasing piecewise-linear map from [0, 1] to [0, 1], flat beyond its end knots."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    raw: tuple[float, ...] = Field(min_length=1)
    """Knot positions: raw confidences, strictly increasing, in [0, 1]."""
    calibrated: tuple[float, ...] = Field(min_length=1)
    """P(correct) at each knot: non-decreasing, in [0, 1]."""
    n: int = Field(default=0, ge=0)
    """Graded outcomes the curve was fitted on."""

    @model_validator(mode="after")
    def _monotone_and_bounded(self) -> CalibrationCurve:
        if len(self.raw) != len(self.calibrated):
            raise ValueError(f"raw has {len(self.raw)} knots but calibrated has {len(self.calibrated)}")
        for name, values in (("raw", self.raw), ("calibrated", self.calibrated)):
            bad = next((v for v in values if not 0.0 <= v <= 1.0 or math.isnan(v)), None)
            if bad is not None:
                raise ValueError(f"{name} knot {bad!r} is outside [0, 1]")
        for a, b in zip(self.raw, self.raw[1:], strict=False):
            if not a < b:
                raise ValueError(f"raw knots must be strictly increasing, got {a!r} then {b!r}")
        for a, b in zip(self.calibrated, self.calibrated[1:], strict=False):
            if b < a:
                raise ValueError(f"calibrated knots must be non-decreasing, got {a!r} then {b!r}")
        return self

    def __call__(self, raw: float) -> float:
        """The calibrated confidence of ``raw`` (linear between knots, flat outside them)."""
        xs, ys = self.raw, self.calibrated
        if raw <= xs[0]:
            return ys[0]
        if raw >= xs[-1]:
            return ys[-1]
        i = bisect.bisect_right(xs, raw)
        x0, x1, y0, y1 = xs[i - 1], xs[i], ys[i - 1], ys[i]
        return y0 + (y1 - y0) * (raw - x0) / (x1 - x0)


class Calibration(BaseModel):
    """Curves by member name, with ``"*"`` for any other member; what a calibration file holds."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    curves: dict[str, CalibrationCurve]
    """By the name of the member that served the answer (a model, ``calculator``); ``"*"`` for the rest."""
    source: str = ""
    """What it was fitted on, for a reader of the evidence (``"142 graded runs of ..."``)."""
    method: str = ""
    """How (``"isotonic regression (scipy.optimize.isotonic_regression), ..."``)."""

    @model_validator(mode="after")
    def _has_a_fallback(self) -> Calibration:
        if ANY_MEMBER not in self.curves:
            raise ValueError(f"curves needs a {ANY_MEMBER!r} curve for members without their own")
        return self

    def curve_for(self, member: str | None) -> CalibrationCurve:
        """The curve of ``member``, or the ``"*"`` curve."""
        return self.curves.get(member or ANY_MEMBER) or self.curves[ANY_MEMBER]

    def __call__(self, raw: float, member: str | None = None) -> float:
        """P(correct) for a raw fused confidence of an answer ``member`` served."""
        return self.curve_for(member)(raw)
