"""The relaxation schedule: how strictly a member is held to its checks' grammars after each failure.

A check that can be written as a grammar shapes decoding (:class:`~retryctl.models.Grammar`); when the
output decoded under it still fails, the grammar may be the problem (too narrow for the answer), so the
next attempt decodes under a wider one. The schedule is the policy's: strictness starts at ``start``,
is multiplied by ``factor`` on each failure and never goes below ``floor``. Which grammar a strictness
allows is the member's business (a ladder of rungs, :func:`~retryctl.models.rung_for`); the schedule
only counts.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from retryctl.exceptions import ConfigError

__all__ = ["Relaxation"]

_EPS = 1e-9


@dataclass(frozen=True, kw_only=True)
class Relaxation:
    """Strictness ``max(floor, start * factor ** failures)`` after ``failures`` failed attempts under a
    grammar: 1.0, 0.8, 0.64, 0.512, 0.41, 0.33, then 0.3 for good with the defaults."""

    start: float = 1.0
    """The strictness of a member's first attempt, in (0, 1]."""
    factor: float = 0.8
    """What each failure multiplies the strictness by, in (0, 1)."""
    floor: float = 0.3
    """The least strictness the schedule reaches, in (0, start]: the widest a member is ever let go."""

    def __post_init__(self) -> None:
        for name in ("start", "factor", "floor"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float) or math.isnan(value):
                raise ConfigError(field=f"relaxation.{name}", value=value, problem="must be a number")
        if not 0.0 < self.start <= 1.0:
            raise ConfigError(field="relaxation.start", value=self.start, problem="must be in (0, 1]")
        if not 0.0 < self.factor < 1.0:
            raise ConfigError(field="relaxation.factor", value=self.factor, problem="must be in (0, 1)")
        if not 0.0 < self.floor <= self.start:
            raise ConfigError(
                field="relaxation.floor", value=self.floor, problem=f"must be in (0, start={self.start:g}]"
            )

    def strictness(self, failures: int) -> float:
        """The strictness after ``failures`` failures (``ConfigError`` for a negative count)."""
        if isinstance(failures, bool) or not isinstance(failures, int) or failures < 0:
            raise ConfigError(field="failures", value=failures, problem="must be an integer >= 0")
        # Past the floor the power underflows harmlessly to 0.0; max() keeps the floor.
        return max(self.floor, self.start * self.factor**failures)

    def at_floor(self, failures: int) -> bool:
        """Whether the strictness after ``failures`` failures is the floor: another failure cannot
        lower it."""
        return self.strictness(failures) <= self.floor + _EPS
