"""Synthetic banks: deterministic, loadable, gold is the mode, logprobs where asked."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from retryctl.controller.stopping import FixedSamples, ThresholdRule
from retryctl.replay import code_bank, make_orders, replay, write_synthetic_bank


class TestWriteSyntheticBank:
    def test_deterministic_and_loadable(self, tmp_path: Path) -> None:
        mix = {"easy": 1.0, "hard": 1.0}
        one = write_synthetic_bank(tmp_path / "a.jsonl", mix=mix, questions=20, samples=30, seed=4)
        two = write_synthetic_bank(tmp_path / "b.jsonl", mix=mix, questions=20, samples=30, seed=4)
        assert one.read_text() == two.read_text()
        bank = code_bank(one)
        assert len(bank.questions) == 20 and all(q.n == 30 for q in bank.questions)
        assert {q.id.split("-")[0] for q in bank.questions} <= {"easy", "hard"}

    def test_gold_is_the_mode_of_the_pooled_samples(self, tmp_path: Path) -> None:
        # Per question the gold is the mode of the distribution; over many samples it must lead.
        path = write_synthetic_bank(
            tmp_path / "m.jsonl", mix={"medium": 1.0}, questions=10, samples=400, seed=2
        )
        for q in code_bank(path).questions:
            counts = Counter(a for a in q.answers if a >= 0)
            assert counts.most_common(1)[0][0] == q.gold

    def test_logprobs_give_confidences_that_favour_the_gold(self, tmp_path: Path) -> None:
        path = write_synthetic_bank(
            tmp_path / "l.jsonl", mix={"hard": 1.0}, questions=30, samples=40, logprobs=True, seed=3
        )
        bank = code_bank(path)
        assert bank.has_confidences
        gold: list[float] = []
        wrong: list[float] = []
        for q in bank.questions:
            for code, conf in zip(q.answers, q.confidences, strict=True):
                if code >= 0 and conf is not None:
                    (gold if code == q.gold else wrong).append(conf)
        assert sum(gold) / len(gold) > sum(wrong) / len(wrong) + 0.1
        # Banks with confidences replay through the uncached path, confidence-reading rules included.
        orders = make_orders(bank, orders=2, seed=0)
        assert replay(bank, ThresholdRule(), orders=orders).avg_samples() <= 8
        assert replay(bank, FixedSamples(n=40), orders=orders).avg_samples() == 40

    def test_unknown_difficulty(self, tmp_path: Path) -> None:
        with pytest.raises(ValueError, match="unknown difficulties"):
            write_synthetic_bank(tmp_path / "x.jsonl", mix={"impossible": 1.0})
