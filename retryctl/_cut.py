"""Samples cut short: the one check, shared by the decoder that cuts and the replay that re-enacts it.

A sample is cut once the mean logprob of its last ``window`` tokens falls below ``log(bound)``. A
module of its own, standard library only, because the embedded backend (a model layer) and the
stopping rules' replay (the controller's) must run the very same float sums in the very same order:
a bound near a window's mean has to cut the same samples in a replay of a bank as it did live.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

__all__ = ["CutWatch", "cut_point"]

_ROUNDING = 1e-9


class CutWatch:
    """Watches a sample's logprobs as they come; :meth:`add` says when it is to be cut."""

    def __init__(self, bound: float, window: int) -> None:
        if not 0.0 < bound < 1.0:
            raise ValueError(f"bound={bound!r}: must be in (0, 1)")
        if window < 1:
            raise ValueError(f"window={window!r}: must be at least 1")
        self.window = window
        # A window as sure as the bound is not below it: the bound is itself a window's mean, read
        # back through exp and log, and rounding must not cut the very sample that set it.
        self._floor = (math.log(bound) - _ROUNDING) * window
        self._recent: list[float] = []
        self._sum = 0.0

    def add(self, logprob: float) -> bool:
        """Take the next token's logprob; ``True`` once the last ``window`` are below the bound."""
        self._recent.append(logprob)
        self._sum += logprob
        if len(self._recent) > self.window:
            self._sum -= self._recent.pop(0)
        return len(self._recent) == self.window and self._sum < self._floor


def cut_point(logprobs: Sequence[float], bound: float, window: int) -> int | None:
    """How many tokens of this sample a decoder cutting at ``bound`` generates (the cutting token
    included), or ``None`` when it is not cut: a sample shorter than ``window`` never is."""
    if not 0.0 < bound < 1.0:
        return None
    watch = CutWatch(bound, window)
    for i, logprob in enumerate(logprobs):
        if watch.add(logprob):
            return i + 1
    return None
