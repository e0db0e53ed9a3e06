"""``fewest_more``: the samples a rule is sure to need, drawn in one call, change nothing.

The property that makes it safe: for any sequence of samples, a loop that asks the rule after every
sample (lowering its cap where a decision says so, as the sampling loop does) stops at some count s;
from any count n before s, ``n + fewest_more(rule, tally at n) <= s``. A batched loop therefore never
draws a sample the one-at-a-time loop would not have drawn, and asks the rule at s as well.
"""

from __future__ import annotations

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
    StoppingRule,
    Tally,
    ThresholdRule,
    fewest_more,
)

PROMISING: list[StoppingRule] = [
    PredictiveCut(),
    PredictiveCut(threshold=0.5, warmup=1),
    ConfidenceWeighted(),
    ConfidenceWeighted(threshold=0.5, cut=False),
    PredictiveMajority(),
    PredictiveMajority(threshold=0.5),
    AdaptiveBeta(),
    AdaptiveBeta(prior=0.5, threshold=0.99),
    AdaptiveDirichlet(),
    AdaptiveDirichlet(prior=0.5, threshold=0.8),
    FixedSamples(n=5),
    ThresholdRule(),
    ThresholdRule(min_samples=1, max_samples=3, confidence=0.5, agreement=0.5),
    PredictiveMajority() & FixedSamples(n=4),
    AdaptiveBeta() | ThresholdRule(),
]

samples = st.lists(
    st.tuples(st.sampled_from(["a", "b", "c", None]), st.floats(min_value=0.0, max_value=1.0)),
    min_size=0,
    max_size=24,
)


def _one_at_a_time(
    rule: StoppingRule, drawn: list[tuple[str | None, float]], cap: int, with_confidences: bool
) -> tuple[int | None, list[Tally]]:
    """Where a loop asking after every sample stops (``None``: not within these samples), and the
    tally it held before each sample."""
    answers: list[str | None] = []
    confidences: list[float] = []
    before: list[Tally] = []
    for answer, confidence in drawn:
        before.append(Tally.of(answers, confidences if with_confidences else None, max_samples=cap))
        answers.append(answer)
        confidences.append(confidence)
        decision = rule(Tally.of(answers, confidences if with_confidences else None, max_samples=cap))
        if decision.max_samples is not None:
            cap = max(len(answers), min(cap, decision.max_samples))
        if decision.stop or len(answers) >= cap:
            return len(answers), before
    return None, before


@settings(max_examples=400, deadline=None)
@given(
    rule=st.sampled_from(PROMISING),
    drawn=samples,
    cap=st.integers(min_value=1, max_value=16),
    with_confidences=st.booleans(),
)
def test_a_batch_never_passes_where_one_at_a_time_stops(
    rule: StoppingRule, drawn: list[tuple[str | None, float]], cap: int, with_confidences: bool
) -> None:
    stop, before = _one_at_a_time(rule, drawn, cap, with_confidences)
    if stop is None:  # the samples ran out first: where it stops depends on samples not drawn
        return
    for n, tally in enumerate(before):
        if n >= stop:
            break
        assert n + fewest_more(rule, tally) <= stop, (n, tally)


class TestWhatItPromises:
    def test_the_default_rule_needs_three_agreeing_samples_at_a_cap_of_eight(self) -> None:
        rule = PredictiveMajority()
        assert fewest_more(rule, Tally.of((), max_samples=8)) == 3
        assert rule(Tally.of(["x"] * 3, max_samples=8)).stop
        assert not rule(Tally.of(["x"] * 2, max_samples=8)).stop

    def test_after_a_disagreement_it_needs_more(self) -> None:
        rule = PredictiveMajority()
        assert fewest_more(rule, Tally.of(["a", "b"], max_samples=20)) > fewest_more(
            rule, Tally.of(["a", "a"], max_samples=20)
        )

    def test_fixed_samples_need_all_of_theirs(self) -> None:
        assert fewest_more(FixedSamples(n=5), Tally.of(["a"], max_samples=40)) == 4

    def test_never_past_the_cap(self) -> None:
        assert fewest_more(FixedSamples(n=40), Tally.of(["a"], max_samples=6)) == 5

    def test_rules_that_may_stop_sooner_on_disagreement_promise_nothing(self) -> None:
        # A window of answers that are all "b" is unanimous even when "a" leads; a difficulty
        # budget lowers its cap when the probe disagrees; a function of the caller's, unknown.
        assert fewest_more(EscWindow(window=4), Tally.of(["a", "a", "b"], max_samples=40)) == 1
        assert fewest_more(DifficultyBudget(), Tally.of(["a"], max_samples=40)) == 1
        assert fewest_more(lambda tally: tally.n >= 5, Tally.of((), max_samples=40)) == 1
        assert fewest_more(PredictiveMajority() | EscWindow(), Tally.of((), max_samples=40)) == 1
