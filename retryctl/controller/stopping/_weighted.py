"""Confidence-weighted votes, and samples cut short (the default before #32; ``weighted`` by name).

``ConfidenceWeighted`` is :class:`PredictiveMajority` asked of weighted votes. Each answered sample's
vote weighs its token confidence relative to the mean confidence of the step's samples (so the
weights sum to the sample count, and equal confidences are plain votes); the leader is the answer with
the most weight, and the rule stops when the rest of the budget would, with probability >= threshold,
leave that leader in the lead. Without confidences it *is* :class:`PredictiveMajority`: the same
decisions, the same reasons.

Samples cut short (DeepConf's online filter, Fu et al. 2025): once ``warmup`` samples are complete,
:meth:`ConfidenceWeighted.cut_bound` is the lowest group confidence (the geometric-mean probability of
``GROUP_WINDOW`` consecutive tokens, :func:`group_floor`) that any of those first samples ever fell
to. A later sample whose running group confidence falls below it is stopped there: it was, over some
stretch, less sure than every one of the first samples ever was. Its tokens are spent and counted; it
gives no vote, and the rule's horizon shrinks by one. It took more samples than ``predictive`` on
every bank measured, and lost accuracy to it on one it had not seen, so the default is now
:class:`~retryctl.controller.stopping.PredictiveCut` (the same cut, plain votes). See docs/stopping.md.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from retryctl._cut import cut_point as _cut_point
from retryctl.controller._signals import weakest_span
from retryctl.controller.stopping._adaptive import PredictiveMajority, predictive_stay_prob
from retryctl.controller.stopping._base import StopDecision, Tally
from retryctl.controller.stopping._default import PredictiveCut
from retryctl.controller.stopping._maths import beta_sf_half
from retryctl.controller.stopping._votes import cap_reached

__all__ = ["GROUP_WINDOW", "ConfidenceWeighted", "cut_point", "group_floor"]

GROUP_WINDOW = 16
"""Tokens per group of the running confidence, chosen on the development banks
(``bench/confidence_stopping.py``): on a partial recording of the reasoning bank, 8 (the
``weakest_span`` signal's window) cut right samples and lost 2.9 points to SC-max where 16 lost
none; on the whole bank (a one-off probe, 10 orders) 8 loses 0.50 points and 16 0.38, so the
choice matters less than that first reading said."""


def group_floor(logprobs: Sequence[float], window: int = GROUP_WINDOW) -> float:
    """The lowest group confidence of a sample: min over every ``window`` consecutive tokens of their
    geometric-mean probability (the whole sample's, when it is shorter): the ``weakest_span`` signal
    over this rule's window."""
    signal = weakest_span(logprobs, window)
    return signal.value if signal.available else 1.0


def cut_point(logprobs: Sequence[float], bound: float, window: int = GROUP_WINDOW) -> int | None:
    """How many tokens a decoder cut at ``bound`` generates of this sample (the cutting token
    included), or ``None`` if it is not cut: what the embedded backend does while decoding, so that
    a replay of a bank spends the tokens a live run would. A sample shorter than the window is never
    cut."""
    return _cut_point(logprobs, bound, window)


def _weighted_votes(tally: Tally) -> tuple[list[tuple[str | None, float]], float]:
    """Weight per outcome ("no answer" included), most first (first seen wins a tie), and the mean
    confidence the weights are relative to."""
    known = [c for c in tally.confidences if c is not None]
    mean = math.fsum(known) / len(known) if known else 1.0
    weight: dict[str | None, float] = {}
    for answer, confidence in zip(tally.answers, tally.confidences, strict=True):
        # A sample without a confidence (a backend that gave none for it) weighs an average vote.
        share = (confidence if confidence is not None else mean) / mean if mean > 0 else 1.0
        weight[answer] = weight.get(answer, 0.0) + share
    # Rounded far below a vote: equal confidences must give the very counts of plain votes (6, not
    # 5.999999999999999), or the predictive sums, which step over whole votes, would differ.
    rounded = {answer: round(total, 9) for answer, total in weight.items()}
    # dicts keep insertion (first seen) order, and sorted() is stable: a tie goes to the first seen,
    # and a real answer before "no answer" when they tie, as ``votes_of`` ranks them.
    ranked = sorted(rounded.items(), key=lambda kv: (-kv[1], kv[0] is None))
    return ranked, mean


@dataclass(frozen=True, kw_only=True, repr=False)
class ConfidenceWeighted(PredictiveCut):
    """:class:`PredictiveMajority` over confidence-weighted votes, with samples cut short (``weighted``).

    The parameters, their checks and the cut are :class:`PredictiveCut`'s (``threshold`` and
    ``prior`` ask the same test of the weighted leader; ``cut=False``: weighted votes only); only
    how votes are counted differs.
    """

    name: str = field(init=False, default="weighted", compare=False)

    @property
    def _counting(self) -> PredictiveMajority:
        return PredictiveMajority(threshold=self.threshold, prior=self.prior)

    def __call__(self, tally: Tally) -> StopDecision:
        if not any(c is not None for c in tally.confidences):
            return replace(self._counting(tally), rule=self.name)
        ranked, mean = _weighted_votes(tally)
        leader = next((a for a, _ in ranked if a is not None), None)
        lead = ranked[0][1]
        rivals = [w for _, w in ranked[1:]] or [0.0]
        second = rivals[0]
        real_lead = ranked[0][0] is not None
        posterior = beta_sf_half(lead + self.prior, second + self.prior) if real_lead else 0.0
        details = {"modal_posterior": posterior, "mean_confidence": mean, "leader_weight": lead}
        if tally.n >= tally.max_samples:
            return replace(cap_reached(tally, self.name, posterior), details=details, leader=leader)
        overtaken = math.fsum(
            1.0 - predictive_stay_prob(lead, rival, tally.n, tally.max_samples, float(self.prior))
            for rival in rivals
        )
        prob = max(0.0, 1.0 - overtaken)
        stop = prob >= self.threshold
        count = sum(a == ranked[0][0] for a in tally.answers)
        what = (
            f"{leader!r} has {count} of {tally.n} votes"
            if real_lead
            else f"no answer in {count} of {tally.n}"
        )
        reason = (
            f"{what}, weight {lead:.2f} by token confidence; "
            f"P(still leads at {tally.max_samples}) = {prob:.4f} {'>=' if stop else '<'} {self.threshold}"
        )
        return StopDecision(
            stop=stop,
            confidence=min(prob, posterior),
            reason=reason,
            rule=self.name,
            details={**details, "posterior": prob, "threshold": self.threshold},
            leader=leader,
        )
