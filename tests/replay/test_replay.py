"""The replay contract: orders, caps, leaders, and that caching never changes a result."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from retryctl.controller.stopping import (
    AdaptiveBeta,
    DifficultyBudget,
    FixedSamples,
    PredictiveMajority,
    StopDecision,
    StopRule,
    Tally,
    as_rule,
)
from retryctl.exceptions import ConfigError
from retryctl.replay import code_bank, make_orders, replay
from tests.replay._banks import question, write_bank


def _distinct_bank(tmp_path: Path, sizes: list[int], gold_index: list[int]):
    """Question q has sizes[q] samples with distinct answers s0, s1, ...; gold is s{gold_index[q]}."""
    records = [
        question(f"q{q}", f"s{gold_index[q]}", [f"s{i}" for i in range(n)]) for q, n in enumerate(sizes)
    ]
    return code_bank(write_bank(tmp_path / "distinct.jsonl", records))


class TestOrderContract:
    def test_orders_outer_questions_inner_one_rng(self, tmp_path: Path) -> None:
        sizes = [5, 3, 8, 1]
        bank = _distinct_bank(tmp_path, sizes, [0, 0, 0, 0])
        rng = random.Random(11)
        expected = []
        for _ in range(4):
            expected.append([rng.sample(range(n), n) for n in sizes])
        assert make_orders(bank, orders=4, seed=11) == expected

    def test_sc1_answers_with_each_orders_first_sample(self, tmp_path: Path) -> None:
        sizes, gold = [6, 4, 9], [2, 3, 0]
        bank = _distinct_bank(tmp_path, sizes, gold)
        # Independently: the first drawn sample is correct when its index is the gold index.
        rng = random.Random(3)
        expected_correct = [0, 0, 0]
        for _ in range(25):
            for q, n in enumerate(sizes):
                perm = rng.sample(range(n), n)
                expected_correct[q] += perm[0] == gold[q]
        result = replay(bank, FixedSamples(n=1), orders=make_orders(bank, orders=25, seed=3))
        assert list(result.correct) == expected_correct
        assert result.samples == (25, 25, 25)
        assert result.accuracy() == pytest.approx(100 * sum(expected_correct) / 75)

    def test_orders_must_be_positive(self, tmp_path: Path) -> None:
        bank = _distinct_bank(tmp_path, [2], [0])
        with pytest.raises(ConfigError) as info:
            make_orders(bank, orders=0, seed=0)
        assert info.value.field == "orders"


class TestReplay:
    def test_leader_tie_goes_to_the_first_seen(self, tmp_path: Path) -> None:
        # Two answers, one each: with SC-2 the answer is whichever came first in the order.
        bank = code_bank(write_bank(tmp_path / "b.jsonl", [question("q", "x", ["x", "y"])]))
        orders = make_orders(bank, orders=30, seed=5)
        result = replay(bank, FixedSamples(n=2), orders=orders)
        assert result.correct[0] == sum(order[0][0] == 0 for order in orders)

    def test_cap_is_the_smallest_of_max_samples_bank_and_rule(self, tmp_path: Path) -> None:
        bank = code_bank(
            write_bank(tmp_path / "b.jsonl", [question("q", "a", ["a", "b", "c", "d", "e", "f"])])
        )
        orders = make_orders(bank, orders=3, seed=0)
        assert replay(bank, FixedSamples(n=40), orders=orders).samples == (18,)
        assert replay(bank, FixedSamples(n=40), orders=orders, max_samples=2).samples == (6,)
        # Three distinct answers in the probe: "hard", cap 4 set by the rule's decision.
        budget = DifficultyBudget(probe=3, easy_max=3, medium_max=4, hard_max=4)
        assert replay(bank, budget, orders=orders).samples == (12,)

    def test_unanswered_samples_never_win(self, tmp_path: Path) -> None:
        bank = code_bank(write_bank(tmp_path / "b.jsonl", [question("q", "a", [None, None, "a"])]))
        result = replay(bank, FixedSamples(n=3), orders=make_orders(bank, orders=4, seed=1))
        assert result.correct == (4,)

    def test_max_samples_must_be_positive(self, tmp_path: Path) -> None:
        bank = _distinct_bank(tmp_path, [2], [0])
        with pytest.raises(ConfigError) as info:
            replay(bank, FixedSamples(n=1), orders=[[[0, 1]]], max_samples=0)
        assert info.value.field == "max_samples"

    def test_a_plain_callable_is_adapted_and_garbage_is_a_type_error(self, tmp_path: Path) -> None:
        bank = _distinct_bank(tmp_path, [3], [0])
        orders = make_orders(bank, orders=4, seed=0)
        assert replay(bank, lambda t: t.n >= 2, orders=orders).samples == (8,)
        with pytest.raises(TypeError, match="returned str"):
            replay(bank, lambda t: "yes", orders=orders)  # type: ignore[arg-type]

    @pytest.mark.parametrize("rule", [AdaptiveBeta(), PredictiveMajority(), FixedSamples(n=5)])
    def test_cached_and_uncached_replays_agree(self, tmp_path: Path, rule: StopRule) -> None:
        rng = random.Random(2)
        records = [
            question(f"q{i}", "a", [rng.choice(["a", "a", "b", "c", None]) for _ in range(12)])
            for i in range(30)
        ]
        bank = code_bank(write_bank(tmp_path / "b.jsonl", records))
        orders = make_orders(bank, orders=6, seed=9)

        def uncached(t: Tally) -> StopDecision:
            return rule(t)

        wrapped = as_rule(uncached)
        assert isinstance(wrapped, StopRule)
        assert not wrapped.order_free and rule.order_free
        fast = replay(bank, rule, orders=orders, max_samples=10)
        slow = replay(bank, wrapped, orders=orders, max_samples=10)
        assert (fast.correct, fast.samples) == (slow.correct, slow.samples)
