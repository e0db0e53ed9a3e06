"""Posterior rules: Adaptive-Consistency's Beta and Dirichlet tests, and the predictive default.

Adaptive-Consistency (Aggarwal et al., 2023) stops when the posterior probability that the leading
answer is the distribution's most likely one reaches a threshold: ``AdaptiveBeta`` models only the
leader and the runner-up (P(p_lead > p_second), uniform prior), ``AdaptiveDirichlet`` every outcome seen.

``PredictiveMajority`` (the default) asks the question a caller actually has: *would drawing the rest of
the budget change the majority answer?* It stops when the posterior predictive probability that the
leader still leads after ``max_samples`` samples reaches ``threshold``. See docs/stopping.md.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from functools import lru_cache
from typing import ClassVar

from retryctl.controller.stopping._base import StopDecision, StopRule, Tally
from retryctl.controller.stopping._maths import beta_sf_half, dirichlet_leader_prob
from retryctl.controller.stopping._validate import check_positive, check_probability
from retryctl.controller.stopping._votes import Votes, cap_reached, describe_leader, votes_of

__all__ = ["AdaptiveBeta", "AdaptiveDirichlet", "PredictiveMajority", "predictive_stay_prob"]


def _decide(
    tally: Tally, votes: Votes, *, prob: float, threshold: float, what: str, rule: str
) -> StopDecision:
    stop = prob >= threshold
    sign = ">=" if stop else "<"
    return StopDecision(
        stop=stop,
        confidence=prob,
        reason=f"{describe_leader(tally, votes)}; {what} = {prob:.4f} {sign} {threshold}",
        rule=rule,
        details={"posterior": prob, "threshold": threshold},
    )


def _no_samples(rule: str) -> StopDecision:
    return StopDecision(False, 0.0, "no samples yet", rule, details={"posterior": 0.0})


@dataclass(frozen=True, kw_only=True, repr=False)
class _PosteriorRule(StopRule):
    """Adaptive-Consistency's shape: stop when a posterior about the leader reaches ``threshold``."""

    threshold: float = 0.95
    """Posterior probability needed to stop (the paper's default 0.95)."""
    prior: float = 1.0
    """Prior pseudo-count per outcome: 1 is the paper's uniform prior, 0.5 Jeffreys'."""
    order_free: bool = field(init=False, default=True, compare=False)
    soonest_on_agreement: bool = field(init=False, default=True, compare=False)
    what: ClassVar[str] = "posterior"

    def __post_init__(self) -> None:
        check_probability("threshold", self.threshold)
        check_positive("prior", self.prior)

    def posterior(self, votes: Votes) -> float:
        raise NotImplementedError

    def __call__(self, tally: Tally) -> StopDecision:
        votes = votes_of(tally)
        if tally.n >= tally.max_samples:
            return cap_reached(tally, self.name, self.posterior(votes) if tally.n else 0.0)
        if tally.n == 0:
            return _no_samples(self.name)
        prob = self.posterior(votes)
        return _decide(tally, votes, prob=prob, threshold=self.threshold, what=self.what, rule=self.name)


@dataclass(frozen=True, kw_only=True, repr=False)
class AdaptiveBeta(_PosteriorRule):
    """Adaptive-Consistency's Beta test: stop when P(leader's share > runner-up's) >= threshold."""

    name: str = field(init=False, default="ac-beta", compare=False)
    what: ClassVar[str] = "P(beats runner-up)"

    def posterior(self, votes: Votes) -> float:
        """P(p_lead > p_second) under Beta(first + prior, second + prior)."""
        return beta_sf_half(votes.first + self.prior, votes.second + self.prior)


@dataclass(frozen=True, kw_only=True, repr=False)
class AdaptiveDirichlet(_PosteriorRule):
    """Adaptive-Consistency's Dirichlet test: stop when P(leader is the most likely outcome) >= threshold.

    Every outcome seen gets ``votes + prior``; with a single outcome, one unseen alternative with
    ``prior`` stands in for "something else", so one sample alone never proves anything.
    """

    name: str = field(init=False, default="ac-dirichlet", compare=False)
    what: ClassVar[str] = "P(most likely)"

    def posterior(self, votes: Votes) -> float:
        """P(p_lead > p_j for all j) under Dirichlet(votes + prior)."""
        alphas = [v + self.prior for v in votes.ranked]
        if len(alphas) == 1:
            alphas.append(self.prior)
        return dirichlet_leader_prob(alphas)


@lru_cache(maxsize=65536)
def predictive_stay_prob(first: int, second: int, n: int, horizon: int, prior: float) -> float:
    """P(the leader, ``first`` votes, is still ahead of one rival, ``second`` votes, at ``horizon``).

    Posterior predictive of one two-way race. The leader's share q among the pair has posterior
    Beta(first + prior, second + prior). Of the ``horizon - n`` samples still to come, the pair gets
    m = ⌈remaining · (first + second) / n⌉ (its share of the samples so far, rounded up); the leader's
    part X of those m is Beta-Binomial(m, first + prior, second + prior). The leader stays ahead when
    first + X >= second + (m - X). A tie counts as kept: the leader has usually appeared first, and
    first-seen wins ties (the one approximation here that leans towards stopping).
    """
    remaining = horizon - n
    if remaining <= 0 or n == 0:
        return 1.0 if n else 0.0
    # Round the pair's expected share of what is left *up*: rounding down can leave a close rival
    # no sample with which to overtake, and the rule would stop on a race that is still open.
    m = math.ceil(remaining * (first + second) / n - 1e-9)
    a, b = first + prior, second + prior
    log_norm = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) - math.lgamma(m + a + b)
    log_m_fact = math.lgamma(m + 1)
    need = (m + second - first) / 2
    total = 0.0
    for x in range(max(0, math.ceil(need)), m + 1):
        total += math.exp(
            log_m_fact
            - math.lgamma(x + 1)
            - math.lgamma(m - x + 1)
            + math.lgamma(x + a)
            + math.lgamma(m - x + b)
            + log_norm
        )
    return min(1.0, total)


@dataclass(frozen=True, kw_only=True, repr=False)
class PredictiveMajority(StopRule):
    """The default: stop when the rest of the budget would, with probability >= threshold, keep the leader.

    Every rival outcome seen (or, with none, one phantom rival with no votes) races the leader for the
    samples still to come (:func:`predictive_stay_prob`); the chances of being overtaken are summed
    (a union bound, so the estimate errs towards sampling more). Two documented parameters:
    ``threshold`` 0.975, at most a 2.5 % chance that sampling on to the cap would change the answer (the
    one-sided 2.5 % level of a two-sided 95 % test); ``prior`` 0.5, Jeffreys' reference prior for a
    proportion, invariant to reparametrisation and neutral between the two answers of each race.
    """

    threshold: float = 0.975
    """Predictive probability that the leader is still the leader at the cap, needed to stop."""
    prior: float = 0.5
    """Beta prior pseudo-count for the leader and for each rival (0.5 = Jeffreys)."""
    name: str = field(init=False, default="predictive", compare=False)
    order_free: bool = field(init=False, default=True, compare=False)
    soonest_on_agreement: bool = field(init=False, default=True, compare=False)

    def __post_init__(self) -> None:
        check_probability("threshold", self.threshold)
        check_positive("prior", self.prior)

    def stay_probability(self, votes: Votes, horizon: int) -> float:
        """P(no rival overtakes the leader by ``horizon`` samples), by the union bound over rivals."""
        rivals = votes.ranked[1:] or (0,)
        overtaken = sum(
            1.0 - predictive_stay_prob(votes.first, rival, votes.n, horizon, float(self.prior))
            for rival in rivals
        )
        return max(0.0, 1.0 - overtaken)

    def modal_posterior(self, votes: Votes) -> float:
        """P(the leader's share beats the runner-up's) under the same prior: the confidence reported."""
        if votes.n == 0 or votes.lead_is_none:
            return 0.0
        return beta_sf_half(votes.first + self.prior, votes.second + self.prior)

    def __call__(self, tally: Tally) -> StopDecision:
        votes = votes_of(tally)
        # The stay probability says whether more samples could change the answer; at the cap it is 1
        # whatever the votes. The confidence the controller fuses must say whether the answer is the
        # model's modal one, so it is capped by that posterior (three different answers: 0.5, not 1).
        posterior = self.modal_posterior(votes)
        if tally.n >= tally.max_samples:
            return cap_reached(tally, self.name, posterior)
        if tally.n == 0:
            return _no_samples(self.name)
        prob = self.stay_probability(votes, tally.max_samples)
        decision = _decide(
            tally,
            votes,
            prob=prob,
            threshold=self.threshold,
            what=f"P(still leads at {tally.max_samples})",
            rule=self.name,
        )
        return replace(
            decision,
            confidence=min(prob, posterior),
            details={**decision.details, "modal_posterior": posterior},
        )
