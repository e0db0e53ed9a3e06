"""Which calibration a verdict is made under: the one ``--calibration`` of ``retryctl eval``, ``batch``
and ``serve`` means, and the label their output and records carry.

* ``shipped``: the calibration shipped for the embedded model (fitted on the project's development set).
  The default where the embedded model serves; refused for another model, of whose outcomes it says
  nothing.
* ``none``: the raw fused confidence.
* a file path: a calibration written by ``retryctl calibrate`` (a bad file is a :class:`ConfigError`
  naming the option and the file).
* not given, on another model (``--base-url``, ``--upstream``): the raw fused confidence, labelled
  ``uncalibrated`` so that no reader takes its confidence for a probability.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from retryctl.controller import Calibration
from retryctl.exceptions import ConfigError

__all__ = ["NONE", "SHIPPED", "UNCALIBRATED", "CalibrationChoice", "choose_calibration"]

SHIPPED = "shipped"
NONE = "none"
UNCALIBRATED = "uncalibrated"
"""The label of a raw confidence on a model no calibration was given for."""


_TAKES = (
    f"--calibration takes {SHIPPED!r}, {NONE!r} or the path of a calibration file written by "
    "retryctl calibrate"
)


@dataclass(frozen=True)
class CalibrationChoice:
    """A calibration to apply (``None``: the raw fused confidence) and its label for records."""

    calibration: Calibration | None
    label: str
    """``shipped``, ``none``, ``uncalibrated`` or the file's path as given."""

    def describe(self) -> str:
        """One line for a person: what the confidences of this run are."""
        if self.calibration is None:
            why = (
                "as asked (--calibration none)"
                if self.label == NONE
                else "no calibration was given for this model"
            )
            return (
                f"calibration: {self.label}: confidences are the raw fused ones, not probabilities ({why}; "
                "fit one with retryctl calibrate and pass --calibration FILE)"
            )
        source = f" ({self.calibration.source})" if self.calibration.source else ""
        return f"calibration: {self.label}{source}"


def choose_calibration(
    value: str | None, *, embedded: bool, option: str = "--calibration"
) -> CalibrationChoice:
    """The calibration ``value`` names (see the module docstring); ``embedded``: whether the embedded
    model serves. A :class:`ConfigError` naming ``option`` for 'shipped' on another model or a bad file."""
    if value is None:
        value = SHIPPED if embedded else UNCALIBRATED
    if value == SHIPPED:
        if not embedded:
            raise ConfigError(
                field=option,
                value=value,
                problem="the shipped calibration is the embedded model's; for another model pass 'none' "
                "or a calibration fitted on it (retryctl calibrate)",
            )
        # The agent package is imported only when the shipped file is asked for.
        from retryctl.agent._calibration import shipped_calibration

        shipped = shipped_calibration()
        return CalibrationChoice(shipped, SHIPPED if shipped is not None else UNCALIBRATED)
    if value in (NONE, UNCALIBRATED):
        return CalibrationChoice(None, value)
    if not value.strip():
        raise ConfigError(field=option, value=value, problem=f"an empty value; {_TAKES}")
    # Imported for a file only: the fit's module tries SciPy, which a gateway never needs.
    from retryctl.evals._fit import load_calibration

    try:
        return CalibrationChoice(load_calibration(value), value)
    except ConfigError as exc:
        problem = exc.problem
        if not os.path.exists(value):
            # A name, not a path, most likely ('Shipped', 'None'): say which names there are.
            near = [name for name in (SHIPPED, NONE) if name == value.strip().lower()]
            hint = f"did you mean {near[0]!r}? " if near else ""
            problem = f"{problem}; {hint}{_TAKES}"
        raise ConfigError(field=option, value=value, problem=problem) from None
