"""The calibration shipped for the demo agent on the embedded model (``calibration.json`` beside this).

Fitted by ``bench/demo_calibration.py`` with ``retryctl calibrate`` on the project's own development
set (``retryctl.evals.word_problems``, never a bank the project was given): docs/evals.md says how.
"""

from __future__ import annotations

import functools
from pathlib import Path

from retryctl.controller import Calibration

__all__ = ["SHIPPED_CALIBRATION", "shipped_calibration"]

SHIPPED_CALIBRATION = Path(__file__).with_name("calibration.json")


@functools.cache
def shipped_calibration() -> Calibration | None:
    """The shipped calibration, ``None`` while none has been fitted (the raw confidence is used)."""
    if not SHIPPED_CALIBRATION.exists():
        return None
    return Calibration.model_validate_json(SHIPPED_CALIBRATION.read_text(encoding="utf-8"))
