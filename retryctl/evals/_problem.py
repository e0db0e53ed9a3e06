"""One generated word problem: what both families of :mod:`retryctl.evals` yield."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["WordProblem"]


@dataclass(frozen=True)
class WordProblem:
    """One generated task: what ``retryctl batch`` and ``retryctl eval`` read, plus how it was made."""

    id: str
    question: str
    gold: int
    stratum: str
    expression: str
    """The arithmetic that solves it (``7 * 8 - 5``): what a right translation computes."""

    def task(self) -> dict[str, Any]:
        """The task line (``id``, ``question``, ``gold``, ``stratum``, ``expression``)."""
        return {
            "id": self.id,
            "question": self.question,
            "gold": self.gold,
            "stratum": self.stratum,
            "expression": self.expression,
        }
