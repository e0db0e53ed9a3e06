"""Each built-in rule on hand-built tallies, with expectations derived by hand."""

from __future__ import annotations

import math

import pytest

from retryctl.controller.stopping import (
    AdaptiveBeta,
    AdaptiveDirichlet,
    DifficultyBudget,
    EscWindow,
    FixedSamples,
    PredictiveMajority,
    StopDecision,
    Tally,
    ThresholdRule,
    beta_sf_half,
)
from retryctl.controller.stopping._adaptive import predictive_stay_prob
from retryctl.controller.stopping._votes import votes_of
from retryctl.exceptions import ConfigError


def tally(answers: str, *, max_samples: int = 40, confidences: list[float | None] | None = None):
    """``"aab."`` → answers a, a, b and one unanswered sample."""
    return Tally.of([None if c == "." else c for c in answers], confidences, max_samples=max_samples)


class TestVotes:
    def test_counts_unanswered_as_an_outcome_but_never_as_leader_on_a_tie(self) -> None:
        votes = votes_of(tally("a..ab"))
        assert votes.ranked == (2, 2, 1)
        assert not votes.lead_is_none
        assert (votes.first, votes.second, votes.rest, votes.distinct) == (2, 2, 1, 3)

    def test_all_unanswered_leads_with_no_answer(self) -> None:
        votes = votes_of(tally("..."))
        assert votes.lead_is_none and votes.first == 3 and votes.second == 0

    def test_empty(self) -> None:
        votes = votes_of(tally(""))
        assert votes.n == 0 and votes.first == 0 and votes.distinct == 0


class TestFixedSamples:
    def test_stops_exactly_at_n(self) -> None:
        rule = FixedSamples(n=3)
        assert not rule(tally("ab")).stop
        decision = rule(tally("abb"))
        assert decision.stop and "max_samples reached" in decision.reason
        assert decision.max_samples == 3
        assert decision.confidence == pytest.approx(2 / 3)

    def test_the_steps_cap_wins_when_lower(self) -> None:
        assert FixedSamples(n=10)(tally("aa", max_samples=2)).stop

    def test_name_and_validation(self) -> None:
        assert FixedSamples(n=7).name == "sc-7"
        with pytest.raises(ConfigError, match="n=0") as info:
            FixedSamples(n=0)
        assert info.value.field == "n"


class TestThresholdRule:
    def test_waits_for_min_samples_even_when_unanimous(self) -> None:
        decision = ThresholdRule(min_samples=3)(tally("aa"))
        assert not decision.stop and "min_samples" in decision.reason

    def test_agreement_stops(self) -> None:
        rule = ThresholdRule()
        assert rule(tally("aa")).stop  # 2 of 2 >= 0.8
        assert not rule(tally("aab")).stop  # 0.667 < 0.8
        decision = rule(tally("aaaab"))  # 0.8 >= 0.8
        assert decision.stop and "agreement 0.800" in decision.reason

    def test_leaders_token_confidence_stops_below_the_agreement_bar(self) -> None:
        # Leader a: confidences 0.95 and 0.89 → mean 0.92 >= 0.9; b's 0.1 is not the leader's.
        decision = ThresholdRule()(tally("aab", confidences=[0.95, 0.89, 0.1]))
        assert decision.stop and decision.confidence == pytest.approx(0.92)
        assert decision.details["token_confidence"] == pytest.approx(0.92)

    def test_low_confidence_and_split_continue(self) -> None:
        decision = ThresholdRule()(tally("aab", confidences=[0.5, 0.6, None]))
        assert not decision.stop and "token confidence 0.550" in decision.reason

    def test_max_eight_lowers_the_cap(self) -> None:
        rule = ThresholdRule()
        assert rule(tally("ab")).max_samples == 8
        assert rule(tally("abcdabcd")).stop

    def test_min_above_max_names_the_field(self) -> None:
        with pytest.raises(ConfigError) as info:
            ThresholdRule(min_samples=9, max_samples=8)
        assert info.value.field == "min_samples" and "max_samples" in str(info.value)

    @pytest.mark.parametrize(("field", "value"), [("confidence", 1.5), ("agreement", 0.0)])
    def test_thresholds_must_be_probabilities(self, field: str, value: float) -> None:
        with pytest.raises(ConfigError) as info:
            ThresholdRule(**{field: value})  # type: ignore[arg-type]
        assert info.value.field == field


class TestEscWindow:
    def test_stops_only_at_window_boundaries_on_a_unanimous_window(self) -> None:
        rule = EscWindow(window=3)
        assert not rule(tally("aa")).stop
        assert rule(tally("aaa")).stop
        assert not rule(tally("aab")).stop
        assert not rule(tally("aabbb")).stop  # mid-window
        assert rule(tally("aabbbb")).stop  # second window b, b, b
        assert "unanimous ('b')" in rule(tally("aabbbb")).reason

    def test_unanimous_no_answer_stops(self) -> None:
        decision = EscWindow(window=2)(tally(".."))
        assert decision.stop and "no answer" in decision.reason

    def test_max_and_validation(self) -> None:
        assert EscWindow(window=5)(tally("abc", max_samples=3)).stop
        with pytest.raises(ConfigError) as info:
            EscWindow(window=0)
        assert info.value.field == "window"


class TestAdaptiveBeta:
    def test_uniform_prior_values(self) -> None:
        rule = AdaptiveBeta()
        # P(X > 1/2), X ~ Beta(v+1, 1) = 1 - 2^-(v+1): 3-0 → 15/16, 4-0 → 31/32.
        three, four = rule(tally("aaa")), rule(tally("aaaa"))
        assert three.confidence == pytest.approx(15 / 16) and not three.stop
        assert four.confidence == pytest.approx(31 / 32) and four.stop
        # 6 vs 1: Beta(7, 2) → P(Bin(8, 1/2) <= 6) = 1 - 9/256; third answers are ignored.
        decision = rule(tally("aaaaaabc"))
        assert decision.confidence == pytest.approx(1 - 9 / 256)
        assert decision.stop

    def test_jeffreys_prior(self) -> None:
        # Beta(3.5, 0.5): from the arcsine law, see test_maths; 0.9669 at 3-0.
        assert AdaptiveBeta(prior=0.5)(tally("aaa")).confidence == pytest.approx(0.96694, abs=1e-4)

    def test_no_samples_and_all_unanswered(self) -> None:
        rule = AdaptiveBeta()
        assert not rule(tally("")).stop
        decision = rule(tally("...."))
        assert decision.stop and "no answer in 4 of 4" in decision.reason

    def test_validation_names_the_field(self) -> None:
        with pytest.raises(ConfigError) as info:
            AdaptiveBeta(threshold=1.2)
        assert info.value.field == "threshold"
        with pytest.raises(ConfigError) as info:
            AdaptiveBeta(prior=0)
        assert info.value.field == "prior"


class TestAdaptiveDirichlet:
    def test_single_outcome_uses_one_unseen_alternative(self) -> None:
        # Dirichlet(4, 1) over (a, unseen) is Beta(4, 1): 1 - 2^-4.
        assert AdaptiveDirichlet()(tally("aaa")).confidence == pytest.approx(15 / 16, abs=1e-6)

    def test_three_way_tie_is_one_third(self) -> None:
        decision = AdaptiveDirichlet()(tally("abc"))
        assert decision.confidence == pytest.approx(1 / 3, abs=1e-6) and not decision.stop

    def test_stricter_than_beta_when_other_answers_appear(self) -> None:
        t = tally("aaaaaabcd")
        assert AdaptiveDirichlet()(t).confidence < AdaptiveBeta()(t).confidence


class TestPredictiveMajority:
    def test_hand_derived_beta_binomial(self) -> None:
        # 1-0 after 1 of 4, Jeffreys: m = 3 future samples to the pair, the leader needs X >= 1.
        # P(X = 0) = B(1.5, 3.5) / B(1.5, 0.5) = Γ(3.5)Γ(2) / (Γ(0.5)Γ(5)) = 1.875 / 24.
        assert predictive_stay_prob(1, 0, 1, 4, 0.5) == pytest.approx(1 - 1.875 / 24)
        # 1-1 after 2 of 3: one more sample to the pair decides; P(leader's) = 1.5 / 3.
        assert predictive_stay_prob(1, 1, 2, 3, 0.5) == pytest.approx(0.5)
        # 2-0 after 2 of 4: even two runner-up votes only tie, which keeps the leader.
        assert predictive_stay_prob(2, 0, 2, 4, 0.5) == pytest.approx(1.0)

    def test_default_stops_at_four_unanimous_of_forty_not_three(self) -> None:
        rule = PredictiveMajority()
        assert not rule(tally("aaa")).stop
        assert rule(tally("aaaa")).stop
        assert not rule(tally("aaaaab")).stop
        assert rule(tally("aaaaaab")).stop

    def test_every_rival_counts_by_the_union_bound(self) -> None:
        one_rival = PredictiveMajority()(tally("aaaaaab")).details["posterior"]
        assert one_rival == pytest.approx(predictive_stay_prob(6, 1, 7, 40, 0.5))
        two_rivals = PredictiveMajority()(tally("aaaaaabc")).details["posterior"]
        assert two_rivals == pytest.approx(1 - 2 * (1 - predictive_stay_prob(6, 1, 8, 40, 0.5)))
        assert two_rivals < predictive_stay_prob(6, 1, 8, 40, 0.5)

    def test_a_small_budget_makes_it_stop_sooner(self) -> None:
        # With 4 samples in all, 3-0 cannot be overturned: the leader survives surely.
        decision = PredictiveMajority()(tally("aaa", max_samples=4))
        assert decision.stop and decision.details["posterior"] == pytest.approx(1.0)
        # ...but surviving is not being right: the confidence is the Jeffreys posterior of 3-0.
        assert decision.confidence == pytest.approx(beta_sf_half(3.5, 0.5))

    def test_confidence_at_the_cap_reflects_disagreement(self) -> None:
        # Regression: at the cap nothing can overturn the leader, which once read as confidence 1.0 and
        # let decide() accept three different answers.
        split = PredictiveMajority()(tally("abc", max_samples=3))
        assert split.stop and split.confidence == pytest.approx(0.5)
        agreed = PredictiveMajority()(tally("aaa", max_samples=3))
        assert agreed.confidence > 0.95 > 0.5
        assert PredictiveMajority()(tally("", max_samples=0)).confidence == 0.0

    def test_reason_and_cap(self) -> None:
        rule = PredictiveMajority()
        assert "P(still leads at 40)" in rule(tally("ab")).reason
        assert rule(tally("ab", max_samples=2)).stop
        assert not rule(tally("")).stop

    def test_validation(self) -> None:
        with pytest.raises(ConfigError) as info:
            PredictiveMajority(threshold=0)
        assert info.value.field == "threshold"


class TestDifficultyBudget:
    def test_easy_probe_stops_at_the_probe(self) -> None:
        rule = DifficultyBudget(probe=3)
        assert not rule(tally("aa")).stop
        decision = rule(tally("aaa"))
        assert decision.stop and decision.max_samples == 3 and decision.reason.startswith("easy")

    def test_medium_and_hard_set_the_cap(self) -> None:
        rule = DifficultyBudget(probe=3, medium_max=12, hard_max=30)
        medium = rule(tally("aab"))
        assert not medium.stop and medium.max_samples == 12
        assert rule(tally("aab" + "a" * 9)).stop
        hard = rule(tally("abc"))
        assert hard.max_samples == 30 and "hard" in hard.reason

    def test_caps_must_grow(self) -> None:
        with pytest.raises(ConfigError) as info:
            DifficultyBudget(easy_max=10, medium_max=5)
        assert info.value.field == "medium_max"
        with pytest.raises(ConfigError) as info:
            DifficultyBudget(probe=4, easy_max=3)
        assert info.value.field == "easy_max"


class TestComposition:
    def test_and_or_with_plain_callables(self) -> None:
        at_least_five = lambda t: t.n >= 5  # noqa: E731
        both = AdaptiveBeta() & at_least_five
        assert not both(tally("aaaa")).stop  # beta says stop, the callable does not
        assert both(tally("aaaaa")).stop
        either = FixedSamples(n=10) | AdaptiveBeta()
        decision = either(tally("aaaa"))
        assert decision.stop and isinstance(decision, StopDecision)
        assert decision.max_samples == 10

    def test_budget_or_posterior_keeps_the_lowest_cap(self) -> None:
        rule = DifficultyBudget() | AdaptiveBeta()
        assert rule(tally("aab")).max_samples == 12
        assert rule.order_free is False
        assert (AdaptiveBeta() | PredictiveMajority()).order_free is True


def test_jeffreys_three_unanimous_closed_form() -> None:
    """1 - I_½(3.5, ½) from the arcsine law, written out: independent of the rule's code path."""
    cdf = 0.5  # arcsine CDF at 1/2
    a = 0.5
    for _ in range(3):
        log_beta = math.lgamma(a) + math.lgamma(0.5) - math.lgamma(a + 0.5)
        cdf -= math.exp(a * math.log(0.5) + 0.5 * math.log(0.5) - log_beta) / a
        a += 1
    assert AdaptiveBeta(prior=0.5)(tally("aaa")).confidence == pytest.approx(1 - cdf, abs=1e-12)
