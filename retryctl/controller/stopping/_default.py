"""The default with token logprobs: the predictive rule over plain votes, with samples cut short.

``PredictiveCut`` is :class:`PredictiveMajority` (the same test, the same reasons) plus DeepConf's
online cut (Fu et al. 2025): once ``warmup`` samples are complete, :meth:`PredictiveCut.cut_bound` is
the lowest group confidence (the geometric-mean probability of ``GROUP_WINDOW`` consecutive tokens)
that any of them ever fell to, and a later sample whose running group confidence falls below it is
stopped there. A cut sample's tokens are spent and counted; it gives no vote, and the votes the rule
may still see (its ``max_samples``) shrink by one. Votes are not weighted by confidence: weights
drew more samples than ``predictive`` on every bank of the embedded model's, and on a bank the
project had not seen (issue #32) the weighted default lost 0.95 points to it (docs/stopping.md).
Without logprobs nothing is cut and it *is* ``predictive``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from retryctl.controller.stopping._adaptive import PredictiveMajority
from retryctl.controller.stopping._base import StopDecision, StopRule, Tally
from retryctl.controller.stopping._validate import check_int_at_least, check_positive, check_probability

__all__ = ["PredictiveCut", "first_floor_bound"]


def first_floor_bound(floors: Sequence[float | None], warmup: int) -> float | None:
    """The cut bound of DeepConf's online filter: the lowest of the first ``warmup`` complete
    samples' floors (in drawing order); ``None`` until that many have one."""
    first = [f for f in floors[:warmup] if f is not None]
    return min(first) if len(first) >= warmup else None


@dataclass(frozen=True, kw_only=True, repr=False)
class PredictiveCut(StopRule):
    """The default: :class:`PredictiveMajority` over the votes of the samples not cut short.

    Three documented parameters, none fitted to a bank: ``threshold`` 0.975 and ``prior`` 0.5 are the
    predictive rule's; ``warmup`` 2 is the fewest complete samples that set a cut bound (the fewest
    that can disagree).
    """

    threshold: float = 0.975
    """Predictive probability that the leader still leads at the cap, needed to stop."""
    prior: float = 0.5
    """Beta prior pseudo-count for the leader and each rival (0.5 = Jeffreys)."""
    warmup: int = 2
    """Complete samples whose lowest group confidence sets the cut bound."""
    cut: bool = True
    """Whether to cut samples short at all (``False``: exactly ``predictive``)."""
    name: str = field(init=False, default="default", compare=False)
    order_free: bool = field(init=False, default=True, compare=False)
    soonest_on_agreement: bool = field(init=False, default=True, compare=False)

    def __post_init__(self) -> None:
        check_probability("threshold", self.threshold)
        check_positive("prior", self.prior)
        check_int_at_least("warmup", self.warmup, 1)

    def cut_bound(self, floors: Sequence[float | None]) -> float | None:
        """The group confidence below which a new sample is cut, from the complete samples' floors
        (:func:`~retryctl.controller.stopping.group_floor`, in drawing order); ``None`` until
        ``warmup`` of them have one."""
        return first_floor_bound(floors, self.warmup) if self.cut else None

    def __call__(self, tally: Tally) -> StopDecision:
        counting = PredictiveMajority(threshold=self.threshold, prior=self.prior)
        return replace(counting(Tally(tally.answers, (), tally.max_samples)), rule=self.name)
