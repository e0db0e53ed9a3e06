"""The embedded backend's sampling knob order: top-k, then top-p over what top-k kept, then min-p, then
the temperature. Shown on a controlled distribution put through the very chain llama-cpp-python
builds from the knobs the backend hands ``Llama.generate`` (:func:`sampler_knobs`)."""

from __future__ import annotations

import ctypes
import math

import pytest

from retryctl.models import SamplingParams
from retryctl.models._embedded import _lock_for
from retryctl.models._sampler_chain import sampler_knobs
from tests.models.conftest import needs_llama

PROBS = (0.5, 0.3, 0.12, 0.08)
Q = [{"role": "user", "content": "Name a colour."}]


def _survivors(llm, params: SamplingParams, probs=PROBS) -> set[int]:
    """The token ids left after the backend's chain runs over ``probs`` (the draw picks among them)."""
    import llama_cpp

    data = (llama_cpp.llama_token_data * len(probs))(
        *(llama_cpp.llama_token_data(i, math.log(p), 0.0) for i, p in enumerate(probs))
    )
    array = llama_cpp.llama_token_data_array(data=data, size=len(probs), selected=-1, sorted=False)
    sampler = llm._init_sampler(**sampler_knobs(params), repeat_penalty=1.0)
    try:
        llama_cpp.llama_sampler_apply(sampler.sampler, ctypes.byref(array))
        return {int(array.data[i].id) for i in range(array.size)}
    finally:
        sampler.close()


def _top_k_then_top_p(probs, k: int, p: float) -> set[int]:
    kept = sorted(range(len(probs)), key=lambda i: -probs[i])[:k]
    mass = sum(probs[i] for i in kept)
    out, total = set(), 0.0
    for i in kept:
        out.add(i)
        total += probs[i] / mass
        if total >= p:
            break
    return out


def _top_p_then_top_k(probs, k: int, p: float) -> set[int]:
    ranked = sorted(range(len(probs)), key=lambda i: -probs[i])
    nucleus, total = [], 0.0
    for i in ranked:
        nucleus.append(i)
        total += probs[i]
        if total >= p:
            break
    return set(nucleus[:k])


@needs_llama
class TestTopKThenTopP:
    @pytest.mark.parametrize(("k", "p"), [(2, 0.6), (3, 0.85)])
    def test_the_candidate_set_is_top_k_then_top_p_where_the_orders_differ(self, embedded, k, p):
        llm = embedded.llama
        got = _survivors(llm, SamplingParams(temperature=1.0, top_k=k, top_p=p, min_p=0.0))
        assert got == _top_k_then_top_p(PROBS, k, p)
        # The other order keeps more here: top-p over the whole distribution first, then top-k.
        assert got != _top_p_then_top_k(PROBS, k, p)
        assert got < _top_p_then_top_k(PROBS, k, p)

    def test_min_p_comes_after_top_p_relative_to_the_top_token(self, embedded):
        # top-k 4, top-p 1.0 keep all; min-p 0.25 drops tokens under 0.25 x 0.5 (0.12 and 0.08).
        got = _survivors(embedded.llama, SamplingParams(temperature=1.0, top_k=4, top_p=1.0, min_p=0.25))
        assert got == {0, 1}

    def test_the_temperature_comes_last_so_the_set_is_that_of_temperature_one(self, embedded):
        # A temperature applied first would sharpen PROBS and keep {0, 1} at 0.3.
        sets = {
            frozenset(
                _survivors(embedded.llama, SamplingParams(temperature=t, top_k=4, top_p=0.85, min_p=0.0))
            )
            for t in (0.3, 1.0, 2.0)
        }
        assert sets == {frozenset({0, 1, 2})}


def _real_probs(embedded) -> list[float]:
    """The embedded model's next-token distribution (temperature 1) after a real prompt."""
    import numpy as np

    llm = embedded.llama
    with _lock_for(llm):
        prompt = llm.tokenize(embedded.render_prompt(Q).encode(), add_bos=False, special=True)
        llm.reset()
        llm.eval(prompt)
        logits = np.ctypeslib.as_array(llm._ctx.get_logits(), shape=(llm.n_vocab(),)).astype(np.float64)
    probs = np.exp(logits - logits.max())
    return [float(p) for p in probs / probs.sum()]


@needs_llama
class TestOnRealLogits:
    def test_the_chain_keeps_the_set_top_k_then_top_p_implies(self, embedded):
        probs = _real_probs(embedded)
        ranked = sorted(probs, reverse=True)
        k = 8
        # A top-p between two renormalised cumulative masses of the top k, far from both (float32 in
        # llama.cpp): the orders then differ wherever top-p alone would keep more than top-k-then-top-p.
        cum = [sum(ranked[: i + 1]) / sum(ranked[:k]) for i in range(k)]
        cases = [
            (i, (cum[i - 1] + cum[i]) / 2)
            for i in range(1, k - 1)
            if cum[i] - cum[i - 1] > 0.01
            and _top_p_then_top_k(probs, k, (cum[i - 1] + cum[i]) / 2)
            != _top_k_then_top_p(probs, k, (cum[i - 1] + cum[i]) / 2)
        ]
        assert cases, ranked[:k]  # this prompt has a case where the orders differ
        for _, p in cases:
            got = _survivors(
                embedded.llama, SamplingParams(temperature=1.0, top_k=k, top_p=p, min_p=0.0), probs
            )
            assert got == _top_k_then_top_p(probs, k, p)
            assert got != _top_p_then_top_k(probs, k, p)
