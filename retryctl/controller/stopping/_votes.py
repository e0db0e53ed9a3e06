"""What the built-in rules read from a tally: the votes of each *outcome*, "no answer" included.

A sample whose answer could not be extracted is an outcome of its own for stopping purposes: a model
that keeps failing to answer is as consistent as one that keeps giving the same answer, and sampling it
further is as wasteful (the step's verdict then turns to refine / switch, not to more samples). It is
never the *leader* of a tally, which stays the top real answer (``Tally.leader``).
"""

from __future__ import annotations

from dataclasses import dataclass

from retryctl.controller.stopping._base import StopDecision, Tally

__all__ = ["Votes", "cap_reached", "describe_leader", "votes_of"]


@dataclass(frozen=True)
class Votes:
    """Outcome votes of a tally, most first; ``lead_is_none`` when "no answer" has the most votes."""

    n: int
    ranked: tuple[int, ...]
    lead_is_none: bool

    @property
    def first(self) -> int:
        """Votes of the top outcome (0 with no samples)."""
        return self.ranked[0] if self.ranked else 0

    @property
    def second(self) -> int:
        """Votes of the runner-up outcome (0 when there is none)."""
        return self.ranked[1] if len(self.ranked) > 1 else 0

    @property
    def rest(self) -> int:
        """Votes of every outcome below the runner-up."""
        return self.n - self.first - self.second

    @property
    def distinct(self) -> int:
        """How many different outcomes appeared."""
        return len(self.ranked)


def votes_of(tally: Tally) -> Votes:
    """Count outcomes; on a tie the real answer ranks above "no answer"."""
    ranked = [votes for _, votes in tally.ranked]
    unanswered = tally.n - sum(ranked)
    lead_is_none = unanswered > (ranked[0] if ranked else 0)
    if unanswered:
        ranked.append(unanswered)
        ranked.sort(reverse=True)
    return Votes(n=tally.n, ranked=tuple(ranked), lead_is_none=lead_is_none)


def cap_reached(tally: Tally, rule: str, confidence: float, cap: int | None = None) -> StopDecision:
    """The decision every rule gives once the step's cap (or the rule's own ``cap``) is reached."""
    limit = tally.max_samples if cap is None else min(cap, tally.max_samples)
    return StopDecision(
        stop=True,
        confidence=min(1.0, max(0.0, confidence)),
        reason=f"max_samples reached ({tally.n} of {limit})",
        rule=rule,
        max_samples=cap,
    )


def describe_leader(tally: Tally, votes: Votes) -> str:
    """A short phrase naming the leading outcome, for reasons."""
    if votes.n == 0:
        return "no samples yet"
    if votes.lead_is_none:
        return f"no answer in {votes.first} of {votes.n} samples"
    return f"{tally.leader!r} has {votes.first} of {votes.n} votes"
