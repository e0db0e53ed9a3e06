"""Per-token diagnostics against hand-computed distributions: entropy (whole and top-k), top-3 mass."""

from __future__ import annotations

import math

import numpy as np
import pytest

from retryctl.models import TokenLogprob
from retryctl.models._logprobs import logprob_of, scored
from retryctl.models._token_stats import token_stats, top_mass, topk_entropy
from tests.models.conftest import needs_llama


def _top(*probs: float) -> tuple[tuple[str, float], ...]:
    return tuple((f"t{i}", math.log(p)) for i, p in enumerate(probs))


class TestTopkEntropy:
    def test_a_whole_distribution_given_is_its_entropy(self) -> None:
        # H(1/2, 1/4, 1/4) = 1/2 ln 2 + 2 · 1/4 ln 4 = 1.5 ln 2
        assert topk_entropy(_top(0.5, 0.25, 0.25)) == pytest.approx(1.5 * math.log(2))

    def test_the_mass_left_counts_as_one_more_outcome(self) -> None:
        # top-2 of (0.5, 0.3, then 0.2 spread over the rest): -(.5 ln .5 + .3 ln .3 + .2 ln .2)
        expected = -(0.5 * math.log(0.5) + 0.3 * math.log(0.3) + 0.2 * math.log(0.2))
        assert topk_entropy(_top(0.5, 0.3)) == pytest.approx(expected)

    def test_it_is_a_lower_bound_of_the_whole_entropy(self) -> None:
        whole = [0.4, 0.2, 0.1, 0.1, 0.1, 0.05, 0.05]
        h = -sum(p * math.log(p) for p in whole)
        assert topk_entropy(_top(*whole[:5])) <= h
        assert topk_entropy(_top(*whole)) == pytest.approx(h)

    def test_a_certain_token_has_none(self) -> None:
        assert topk_entropy(_top(1.0)) == 0.0


class TestTopMass:
    def test_the_three_most_likely_add_up(self) -> None:
        assert top_mass(_top(0.5, 0.3, 0.1, 0.05)) == pytest.approx(0.9)

    def test_alternatives_out_of_order_or_repeated_count_once_each(self) -> None:
        top = (("b", math.log(0.1)), ("a", math.log(0.5)), ("a", math.log(0.5)), ("c", math.log(0.3)))
        assert top_mass(top) == pytest.approx(0.9)
        assert topk_entropy(top) == pytest.approx(topk_entropy(_top(0.5, 0.3, 0.1)))

    def test_fewer_alternatives_add_up_what_there_is(self) -> None:
        assert top_mass(_top(0.6, 0.2)) == pytest.approx(0.8)


class TestScored:
    def test_the_whole_vocabularys_entropy_comes_with_the_logprob(self) -> None:
        logits = np.log(np.array([0.5, 0.25, 0.25], dtype=np.float32)) + np.float32(3.0)
        lp, top, entropy = scored(logits, 1, top=2)
        assert lp == pytest.approx(math.log(0.25), abs=1e-6)
        assert entropy == pytest.approx(1.5 * math.log(2), abs=1e-6)
        assert [i for i, _ in top] == [0, 1] or [i for i, _ in top] == [0, 2]
        assert logprob_of(logits, 1, top=2) == (lp, top)  # the old call is unchanged

    def test_a_uniform_distribution_has_log_n(self) -> None:
        assert scored(np.zeros(8, dtype=np.float32), 3)[2] == pytest.approx(math.log(8), abs=1e-6)


class TestTokenStats:
    def test_a_whole_entropy_is_labelled_full(self) -> None:
        tokens = [TokenLogprob("4", math.log(0.5), _top(0.5, 0.3, 0.1), entropy=1.2345)]
        stats = token_stats(tokens)
        assert stats == {
            "token_text": ["4"],
            "token_logprobs": [round(math.log(0.5), 3)],
            "tokens_total": 1,
            "token_entropy": [1.234],
            "entropy_kind": "full",
            "token_top3": [0.9],
        }

    def test_without_the_whole_entropy_the_top_k_estimate_is_labelled_so(self) -> None:
        tokens = [TokenLogprob(t, math.log(0.5), _top(0.5, 0.25, 0.25, 1e-9, 1e-9)) for t in "ab"]
        stats = token_stats(tokens)
        assert stats["entropy_kind"] == "top5"
        assert stats["token_entropy"] == [round(1.5 * math.log(2), 3)] * 2

    def test_logprobs_alone_carry_no_entropy(self) -> None:
        stats = token_stats([TokenLogprob("a", -0.1), TokenLogprob("b", -2.0)])
        assert stats == {"token_text": ["a", "b"], "token_logprobs": [-0.1, -2.0], "tokens_total": 2}

    def test_the_cap_keeps_the_first_tokens_and_says_how_many_there_were(self) -> None:
        stats = token_stats([TokenLogprob(str(i), -0.5) for i in range(10)], cap=3)
        assert stats["token_text"] == ["0", "1", "2"] and stats["tokens_total"] == 10


@needs_llama
class TestOnARealServer:
    def test_an_openai_compatible_servers_top5_gives_a_labelled_estimate(self, llama_server: str) -> None:
        from retryctl.models import OpenAIBackend, SamplingParams, sample_blocking

        backend = OpenAIBackend(model="smollm2", base_url=llama_server, api_key="none", timeout_s=120.0)
        params = SamplingParams(max_tokens=6, seed=1, temperature=0.7, top_logprobs=5)
        (candidate,) = sample_blocking(backend, [{"role": "user", "content": "What is 2 + 3?"}], params)
        # llama.cpp's server adds the drawn token to the five when it is not among them.
        assert candidate.logprobs and all(t.entropy is None and len(t.top) >= 5 for t in candidate.logprobs)
        stats = token_stats(candidate.logprobs)
        assert stats["entropy_kind"] == "top5"
        n = len(candidate.logprobs)
        assert len(stats["token_entropy"]) == len(stats["token_top3"]) == n
        # A lower bound of at most ln 6 (five tokens and the rest); the top-3 mass is a probability.
        assert all(0.0 <= h <= math.log(6) + 1e-3 for h in stats["token_entropy"])
        assert all(0.0 < m <= 1.0 for m in stats["token_top3"])
