"""Clocks are injected so that budgets, breakers and tests never depend on real sleeping."""

from __future__ import annotations

import time
from collections.abc import Callable

__all__ = ["Clock", "ManualClock", "ShiftedClock", "monotonic"]

Clock = Callable[[], float]
"""A clock is any zero-argument callable returning seconds as a float (``time.monotonic`` by default)."""

monotonic: Clock = time.monotonic


class ManualClock:
    """A clock that moves only when told to: ``clock.advance(1.5)``."""

    def __init__(self, start: float = 0.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        if seconds < 0:
            raise ValueError(f"cannot move a clock backwards (seconds={seconds})")
        self.now += seconds


class ShiftedClock:
    """``clock`` moved forward by ``offset`` seconds: the time a run spent before this process met it
    (a step or an agent run resumed elsewhere goes on with its elapsed wall time)."""

    def __init__(self, clock: Clock, offset: float = 0.0) -> None:
        self.clock = clock
        self.offset = offset

    def __call__(self) -> float:
        return self.clock() + self.offset
