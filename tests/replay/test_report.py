"""Strata, paired deltas and the JSON row of a policy."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from retryctl.replay import (
    ReplayResult,
    code_bank,
    make_orders,
    paired_delta,
    run_policies,
    strata_of,
    summary_row,
)
from tests.replay._banks import question, write_bank


class TestStrata:
    def test_split_by_full_bank_leader_share(self, tmp_path: Path) -> None:
        records = [
            question("easy", "a", ["a"] * 9 + ["b"]),  # 0.9
            question("medium", "a", ["a"] * 6 + ["b"] * 4),  # 0.6
            question("hard", "a", ["a"] * 5 + ["b"] * 5),  # 0.5
            question("none", "a", [None, None]),  # 0.0
        ]
        bank = code_bank(write_bank(tmp_path / "b.jsonl", records))
        assert strata_of(bank) == {"agree>=0.9": [0], "agree 0.6-0.9": [1], "agree<0.6": [2, 3]}


class TestPairedDelta:
    def test_hand_computed(self) -> None:
        a = ReplayResult(policy="a", orders=2, correct=(2, 1, 0), samples=(4, 4, 4))
        b = ReplayResult(policy="b", orders=2, correct=(2, 0, 0), samples=(8, 8, 8))
        # Per-question differences in points: 0, 50, 0 → mean 50/3, sd 28.87, se = sd / √3.
        delta, se = paired_delta(a, b, [0, 1, 2])
        assert delta == pytest.approx(50 / 3)
        sd = math.sqrt(((0 - 50 / 3) ** 2 * 2 + (50 - 50 / 3) ** 2) / 2)
        assert se == pytest.approx(sd / math.sqrt(3))
        assert paired_delta(a, b, []) == (0.0, 0.0)
        assert paired_delta(a, b, [1]) == (50.0, 0.0)


class TestSummaryRow:
    def test_contract_keys_and_optional_parts(self, tmp_path: Path) -> None:
        records = [question(f"q{i}", "a", ["a", "a", "b", "a"]) for i in range(3)]
        bank = code_bank(write_bank(tmp_path / "b.jsonl", records))
        orders = make_orders(bank, orders=2, seed=0)
        first, second = run_policies(bank, ["sc-4", "sc-1"], orders=orders, max_samples=40)
        row = summary_row(first)
        assert set(row) == {
            "policy", "accuracy", "avg_samples", "avg_tokens", "cut_rate", "questions", "orders", "ece",
            "auroc",
        }  # fmt: skip
        assert row["avg_tokens"] is None  # the bank gives no token counts
        assert row["auroc"] is None  # every answer right: nothing to rank a wrong one against
        assert row["accuracy"] == 1.0 and row["avg_samples"] == 4.0  # a fraction, as every command prints
        assert (row["questions"], row["orders"]) == (3, 2)
        split = summary_row(second, strata=strata_of(bank), baseline=first)["strata"]
        assert split["agree 0.6-0.9"]["questions"] == 3 and split["agree 0.6-0.9"]["delta_vs"] == "sc-4"
        assert split["agree 0.6-0.9"]["delta"] == pytest.approx((second.accuracy() - 100.0) / 100, abs=1e-4)


class TestFinalConfidence:
    def test_ece_and_auroc_of_the_rules_last_confidence(self, tmp_path: Path) -> None:
        # q0: unanimous and right (SC-4 share 1.0); q1: split, and its majority wrong (share 0.5).
        records = [question("q0", "a", ["a"] * 4), question("q1", "a", ["b", "b", "a", "c"])]
        bank = code_bank(write_bank(tmp_path / "b.jsonl", records))
        [result] = run_policies(bank, ["sc-4"], orders=make_orders(bank, orders=3, seed=0), max_samples=4)
        assert result.auroc == 1.0  # the right answer always had the higher confidence
        # Six points make one bin: mean confidence 0.75, half of them right.
        assert result.ece == pytest.approx(0.25)
