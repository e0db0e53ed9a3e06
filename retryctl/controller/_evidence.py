"""Which candidates are evidence of their own, and which only repeat one already counted.

Three candidates decoded near-greedily from one prompt are one decoding, printed three times: counting
them as three votes turns one guess into "agreement 1.0". A candidate *repeats* an earlier one of the
same attempt when their texts are equal and either they were decoded with the same seed (the same
random stream gives the same tokens) or both at a temperature of at most :data:`NEAR_GREEDY`, where
sampling hardly leaves the most likely path. A repeat is kept and shown, but it is not a vote: the
stopping rule and the agreement signal see one vote for the decoding, however often it was drawn.

Equal texts drawn at a higher temperature with different seeds stay separate votes: there each draw
could have differed, and that it did not is what agreement measures.
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["NEAR_GREEDY", "Repeats"]

NEAR_GREEDY = 0.3
"""Temperatures at or below this count as greedy: measured on the embedded SmolLM2-135M, 0.2 gives the
same expression on 7 or 8 of 8 seeds for most questions; 0.7 gives several different ones."""


@dataclass
class Repeats:
    """The candidates of one attempt seen so far, to tell a repeat from new evidence."""

    _seeded: set[tuple[str, int]] = field(default_factory=set)
    _greedy: set[str] = field(default_factory=set)

    def check(self, text: str, *, seed: int | None, temperature: float | None) -> bool:
        """Whether this candidate repeats one seen before; records it either way."""
        greedy = temperature is not None and temperature <= NEAR_GREEDY
        repeat = (seed is not None and (text, seed) in self._seeded) or (greedy and text in self._greedy)
        if seed is not None:
            self._seeded.add((text, seed))
        if greedy:
            self._greedy.add(text)
        return repeat
