"""Every rule, combination and adapted callable returns a valid StopDecision for every tally."""

from __future__ import annotations

import math

from hypothesis import given, settings
from hypothesis import strategies as st

from retryctl.controller.stopping import (
    AdaptiveBeta,
    AdaptiveDirichlet,
    ConfidenceWeighted,
    DifficultyBudget,
    EscWindow,
    FixedSamples,
    PredictiveCut,
    PredictiveMajority,
    StopDecision,
    StoppingRule,
    StopRule,
    Tally,
    ThresholdRule,
    as_rule,
)

BASE_RULES: list[StopRule] = [
    PredictiveCut(),
    PredictiveCut(threshold=0.5, warmup=1),
    ConfidenceWeighted(),
    ConfidenceWeighted(threshold=0.5, warmup=1),
    FixedSamples(n=1),
    FixedSamples(n=5),
    ThresholdRule(),
    ThresholdRule(min_samples=1, max_samples=3, confidence=0.5, agreement=0.5),
    EscWindow(window=1),
    EscWindow(window=4),
    AdaptiveBeta(),
    AdaptiveBeta(prior=0.5, threshold=0.99),
    AdaptiveDirichlet(),
    AdaptiveDirichlet(prior=0.5, threshold=0.8),
    PredictiveMajority(),
    PredictiveMajority(threshold=0.5),
    DifficultyBudget(),
    DifficultyBudget(probe=1, easy_max=2, medium_max=4, hard_max=6),
]


def _majority_fn(t: Tally) -> bool:
    return t.agreement > 0.5


def _decision_fn(t: Tally) -> StopDecision:
    return StopDecision(t.n >= 2, t.agreement, "two samples", "fn")


ALL_RULES: list[StoppingRule] = [
    *BASE_RULES,
    AdaptiveBeta() & EscWindow(),
    PredictiveMajority() | DifficultyBudget(),
    ThresholdRule() & (AdaptiveDirichlet() | FixedSamples(n=3)),
    as_rule(_majority_fn),
    as_rule(_decision_fn),
    AdaptiveBeta() | _majority_fn,
    _decision_fn & PredictiveMajority(),
]

answers = st.lists(st.sampled_from(["a", "b", "c", "d", None]), max_size=14)


@st.composite
def tallies(draw: st.DrawFn) -> Tally:
    drawn = draw(answers)
    with_conf = draw(st.booleans())
    confidences = (
        draw(st.lists(st.one_of(st.none(), st.floats(0.0, 1.0)), min_size=len(drawn), max_size=len(drawn)))
        if with_conf
        else None
    )
    max_samples = draw(st.integers(1, 16))
    return Tally.of(drawn, confidences, max_samples=max_samples)


def _valid(decision: object) -> None:
    assert isinstance(decision, StopDecision)
    assert isinstance(decision.stop, bool)
    assert isinstance(decision.confidence, float | int)
    assert math.isfinite(decision.confidence) and 0.0 <= decision.confidence <= 1.0
    assert isinstance(decision.reason, str) and decision.reason
    assert decision.max_samples is None or decision.max_samples >= 1


class TestEveryRuleDecides:
    @settings(max_examples=150, deadline=None)
    @given(tally=tallies())
    def test_every_rule_returns_a_valid_decision(self, tally: Tally) -> None:
        for rule in ALL_RULES:
            _valid(rule(tally))

    @settings(max_examples=100, deadline=None)
    @given(tally=tallies())
    def test_builtins_always_stop_at_the_cap(self, tally: Tally) -> None:
        if tally.n >= tally.max_samples:
            for rule in BASE_RULES:
                assert rule(tally).stop, rule

    @settings(max_examples=100, deadline=None)
    @given(tally=tallies())
    def test_and_is_never_looser_and_or_never_stricter(self, tally: Tally) -> None:
        left, right = AdaptiveBeta(), EscWindow(window=2)
        a, b = left(tally).stop, right(tally).stop
        assert (left & right)(tally).stop == (a and b)
        assert (left | right)(tally).stop == (a or b)

    @settings(max_examples=80, deadline=None)
    @given(drawn=answers, data=st.data())
    def test_order_free_rules_ignore_order(self, drawn: list[str | None], data: st.DataObject) -> None:
        shuffled = data.draw(st.permutations(drawn))
        for rule in BASE_RULES:
            if rule.order_free:
                one = rule(Tally.of(drawn, max_samples=16))
                two = rule(Tally.of(shuffled, max_samples=16))
                assert one.stop == two.stop, rule
                assert one.confidence == two.confidence, rule
