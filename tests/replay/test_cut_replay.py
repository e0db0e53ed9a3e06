"""Replays of banks with token logprobs: tokens spent, samples cut short, weighted answers."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from retryctl.controller.stopping import ConfidenceWeighted, FixedSamples, PredictiveCut, PredictiveMajority
from retryctl.replay import code_bank, make_orders, replay, write_synthetic_bank
from tests.replay._banks import write_bank

SURE, DOUBT = math.log(0.9), math.log(0.05)


def _sample(answer: str, logprobs: list[float]) -> dict[str, Any]:
    return {"text": f"The answer is {answer}.", "answer": answer, "token_logprobs": logprobs}


def _bank(tmp_path: Path) -> Path:
    # Two sure samples that disagree first (their floors, 0.9, set the cut bound), then two whose
    # tokens turn doubtful after 10 tokens, then two more sure ones.
    a, c = _sample("a", [SURE] * 20), _sample("c", [SURE] * 20)
    doubtful = _sample("b", [SURE] * 10 + [DOUBT] * 30)
    record = {"id": "q", "question": "?", "gold": "a", "samples": [a, c, doubtful, doubtful, a, a]}
    return write_bank(tmp_path / "b.jsonl", [record])


class TestCutShort:
    def test_a_doubtful_sample_is_cut_spends_its_tokens_and_gives_no_vote(self, tmp_path: Path) -> None:
        bank = code_bank(_bank(tmp_path))
        identity = [[[0, 1, 2, 3, 4, 5]]]
        result = replay(bank, ConfidenceWeighted(), orders=identity, max_samples=6)
        # The first window of 16 tokens (10 sure, 6 doubtful) is already below 0.9: cut at token 16.
        assert result.cut == 2
        # Then "a" leads "c" 2 to 1 with one vote left to the cap (6 samples, 2 cut): it cannot lose.
        assert result.tokens == (20 + 20 + 16 + 16 + 20,)
        assert result.samples == (5,) and result.correct == (1,)
        uncut = replay(bank, ConfidenceWeighted(cut=False), orders=identity, max_samples=6)
        assert uncut.cut == 0 and uncut.tokens is not None and uncut.tokens[0] > result.tokens[0]

    def test_the_default_cuts_the_same_samples_and_counts_plain_votes(self, tmp_path: Path) -> None:
        bank = code_bank(_bank(tmp_path))
        identity = [[[0, 1, 2, 3, 4, 5]]]
        default = replay(bank, PredictiveCut(), orders=identity, max_samples=6)
        weighted = replay(bank, ConfidenceWeighted(), orders=identity, max_samples=6)
        assert (default.cut, default.tokens) == (weighted.cut, weighted.tokens)
        assert default.samples == weighted.samples
        # Without the cut it is the vote-only rule: the two doubtful "b" samples vote and the
        # question runs to the cap, every token spent.
        uncut = replay(bank, PredictiveCut(cut=False), orders=identity, max_samples=6)
        counted = replay(bank, PredictiveMajority(), orders=identity, max_samples=6)
        assert (uncut.cut, uncut.tokens, uncut.samples) == (counted.cut, counted.tokens, counted.samples)
        assert uncut.tokens is not None and default.tokens is not None and uncut.tokens[0] > default.tokens[0]

    def test_vote_only_rules_spend_every_token_drawn(self, tmp_path: Path) -> None:
        bank = code_bank(_bank(tmp_path))
        result = replay(bank, FixedSamples(n=6), orders=[[[0, 1, 2, 3, 4, 5]]], max_samples=6)
        assert result.cut == 0 and result.tokens == (20 * 4 + 40 * 2,)
        assert result.avg_tokens() == 160.0

    def test_tokens_are_unknown_when_the_bank_does_not_give_them(self, tmp_path: Path) -> None:
        path = write_bank(
            tmp_path / "b.jsonl", [{"id": "q", "question": "?", "gold": "a", "samples": [{"text": "a"}]}]
        )
        bank = code_bank(path)
        assert replay(bank, PredictiveMajority(), orders=[[[0]]], max_samples=1).avg_tokens() is None

    def test_a_recorded_token_count_is_used_where_logprobs_are_not(self, tmp_path: Path) -> None:
        samples = [{"text": "The answer is a.", "answer": "a", "tokens": 7}] * 3
        bank = code_bank(
            write_bank(tmp_path / "b.jsonl", [{"id": "q", "question": "?", "gold": "a", "samples": samples}])
        )
        result = replay(bank, FixedSamples(n=3), orders=[[[0, 1, 2]]], max_samples=3)
        assert result.tokens == (21,)


class TestWeightedAnswer:
    def test_the_answer_is_the_weighted_leader(self, tmp_path: Path) -> None:
        doubt = [math.log(0.2)] * 4
        sure = [math.log(0.95)] * 4
        samples = [_sample("b", doubt), _sample("b", doubt), _sample("a", sure)]
        bank = code_bank(
            write_bank(tmp_path / "b.jsonl", [{"id": "q", "question": "?", "gold": "a", "samples": samples}])
        )
        order = [[[0, 2, 1]]]  # b, a: split; then b: two doubtful votes against one sure one
        assert replay(bank, ConfidenceWeighted(cut=False), orders=order, max_samples=3).correct == (1,)
        assert replay(bank, PredictiveMajority(), orders=order, max_samples=3).correct == (0,)


class TestSynthetic:
    def test_weighting_is_more_accurate_where_confidence_tells_right_from_wrong(self, tmp_path: Path) -> None:
        # The synthetic bank's right samples are more confident (Beta(8, 2) against Beta(5, 3)).
        path = write_synthetic_bank(
            tmp_path / "s.jsonl", mix={"hard": 1.0}, questions=60, samples=40, logprobs=True, seed=3
        )
        bank = code_bank(path)
        orders = make_orders(bank, orders=4, seed=0)
        weighted = replay(bank, ConfidenceWeighted(), orders=orders, max_samples=40)
        counted = replay(bank, PredictiveMajority(), orders=orders, max_samples=40)
        assert weighted.accuracy() > counted.accuracy()
        assert weighted.avg_tokens() is not None and counted.avg_tokens() is not None
