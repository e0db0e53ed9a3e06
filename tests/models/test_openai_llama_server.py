"""OpenAIBackend against a real ``python -m llama_cpp.server`` serving the embedded model on 127.0.0.1."""

from __future__ import annotations

import asyncio
import math

from retryctl.models import OpenAIBackend, SamplingParams
from tests.models.conftest import needs_llama

Q = [{"role": "user", "content": "Name a colour."}]


@needs_llama
class TestOpenAIBackendOnLlamaServer:
    def test_real_completion_with_logprobs(self, llama_server):
        backend = OpenAIBackend(model="smollm2", base_url=llama_server, timeout_s=120)
        params = SamplingParams(temperature=0.0, max_tokens=12, top_logprobs=3, seed=1)
        [cand] = asyncio.run(backend.sample(Q, params))
        assert cand.text.strip()
        assert cand.logprobs is not None and len(cand.logprobs) == cand.usage.output_tokens
        assert all(lp.logprob <= 0.0 and math.isfinite(lp.logprob) for lp in cand.logprobs)
        # Greedy decoding picks the most likely token, so it tops its own alternatives.
        first = cand.logprobs[0]
        assert first.top and first.top[0][1] >= first.logprob - 1e-4
        assert cand.usage.input_tokens > 0 and cand.latency_ms > 0
        assert cand.finish_reason in ("stop", "length")

    def test_n_fallback_against_a_server_that_ignores_n(self, llama_server):
        backend = OpenAIBackend(model="smollm2", base_url=llama_server, timeout_s=120)
        params = SamplingParams(temperature=1.0, max_tokens=8, seed=42, logprobs=False)
        cands = asyncio.run(backend.sample(Q, params, k=3))
        assert len(cands) == 3
        assert backend.honours_n is False  # llama.cpp's server answered n=3 with one choice
        assert sorted(c.seed for c in cands if c.seed is not None) == [42, 43, 44]
        assert all(c.text for c in cands)
        assert any("ignored n=3" in note for c in cands for note in c.notes)

    def test_same_seed_same_answer(self, llama_server):
        backend = OpenAIBackend(model="smollm2", base_url=llama_server, timeout_s=120)
        params = SamplingParams(temperature=1.0, max_tokens=8, seed=7, logprobs=False)
        first = backend.sample_sync(Q, params)
        second = backend.sample_sync(Q, params)
        assert first[0].text == second[0].text
        backend.close()
