"""The embedded backend's sampling knob order: top-k, then top-p over what top-k kept, then min-p, then
the temperature. Shown on a controlled distribution put through the very chain llama-cpp-python
builds from the knobs the backend hands ``Llama.generate`` (:func:`sampler_knobs`)."""

from __future__ import annotations

import ctypes
import math

import pytest

from retryctl.models import SamplingParams
from retryctl.models._sampler_chain import sampler_knobs
from tests.models.conftest import needs_llama

PROBS = (0.5, 0.3, 0.12, 0.08)


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
