"""EmbeddedBackend with the real SmolLM2-135M-Instruct GGUF (the ``local`` extra)."""

from __future__ import annotations

import asyncio
import importlib
import json
import math
import threading
from typing import Any

import pytest

from retryctl.controller.stopping import cut_point
from retryctl.models import (
    ConstraintPolicy,
    EmbeddedBackend,
    SamplingParams,
    TerminalBackendError,
    ToolSpec,
)
from tests.models.conftest import needs_llama

Q = [{"role": "user", "content": "What is the capital of France?"}]
CALC = ToolSpec(
    name="calculator",
    description="Evaluate an arithmetic expression.",
    parameters={
        "type": "object",
        "properties": {"expression": {"type": "string"}},
        "required": ["expression"],
    },
)


@needs_llama
class TestEmbeddedBackend:
    def test_generates_k_candidates_with_per_token_logprobs(self, embedded):
        params = SamplingParams(temperature=0.8, max_tokens=16, seed=3, top_logprobs=4)
        cands = embedded.sample_sync(Q, params, k=2)
        assert len(cands) == 2 and [c.seed for c in cands] == [3, 4]
        for cand in cands:
            assert cand.text and cand.model.startswith("embedded:SmolLM2")
            assert cand.logprobs is not None
            assert len(cand.logprobs) == cand.usage.output_tokens > 0
            assert cand.usage.input_tokens > 0 and cand.latency_ms > 0
            assert "".join(t.token for t in cand.logprobs) == cand.text
            for tok in cand.logprobs:
                assert tok.logprob <= 0.0 and math.isfinite(tok.logprob)
                alts = [lp for _, lp in tok.top]
                assert len(alts) == 4 and alts == sorted(alts, reverse=True)
                # Nothing beats the most likely alternative; anything likelier than the last is listed.
                assert tok.logprob <= alts[0] + 1e-9
                assert tok.logprob < alts[-1] or tok.token in {t for t, _ in tok.top}

    def test_logprobs_match_llama_cpp_logits_all_path(self, gguf_path):
        """Our fast path (last logits + numpy log-softmax) equals the library's own logprobs."""
        llama_cpp: Any = importlib.import_module("llama_cpp")
        slow = llama_cpp.Llama(model_path=str(gguf_path), n_ctx=512, logits_all=True, verbose=False)
        ref = slow.create_chat_completion(Q, temperature=0.0, max_tokens=10, logprobs=True, top_logprobs=2)
        ref_tokens = ref["choices"][0]["logprobs"]["content"]
        params = SamplingParams(temperature=0.0, max_tokens=10, top_logprobs=2)
        # A fresh context, as the reference has: after an earlier call on the same prompt, llama.cpp
        # reuses the cached prefix and re-evaluates only its last token, one token instead of a batch,
        # whose kernels round differently (up to 0.15 in a logprob on the x86-64-v3 build).
        fresh = EmbeddedBackend(model_path=gguf_path, n_ctx=1024)
        try:
            [cand] = fresh.sample_sync(Q, params)
        finally:
            fresh.close()
        assert cand.logprobs is not None
        assert [t.token for t in cand.logprobs] == [t["token"] for t in ref_tokens]
        for ours, theirs in zip(cand.logprobs, ref_tokens, strict=True):
            assert ours.logprob == pytest.approx(theirs["logprob"], abs=1e-3)
        slow.close()

    def test_same_seed_same_text(self, embedded):
        params = SamplingParams(temperature=1.0, max_tokens=12, seed=99, logprobs=False)
        first = embedded.sample_sync(Q, params)[0]
        second = embedded.sample_sync(Q, params)[0]
        assert first.text == second.text and first.logprobs is None

    def test_stop_string_cuts_text_and_tokens(self, embedded):
        greedy = SamplingParams(temperature=0.0, max_tokens=24)
        [full] = embedded.sample_sync(Q, greedy)
        words = full.text.split()
        assert len(words) >= 3, full.text
        stop = " " + words[2]  # a string known to occur in the greedy text
        [cut] = embedded.sample_sync(Q, SamplingParams(temperature=0.0, max_tokens=24, stop=(stop,)))
        assert cut.text == full.text[: full.text.index(stop)]
        assert cut.finish_reason == "stop"
        assert cut.logprobs is not None and "".join(t.token for t in cut.logprobs) == cut.text

    def test_max_tokens_ends_with_length(self, embedded):
        story = [{"role": "user", "content": "Write a long story about a dragon."}]
        [cand] = embedded.sample_sync(story, SamplingParams(temperature=0.0, max_tokens=5))
        assert cand.finish_reason == "length" and cand.usage.output_tokens == 5

    def test_json_schema_answer_is_constrained(self, embedded):
        schema = {
            "type": "object",
            "properties": {"answer": {"type": "integer"}},
            "required": ["answer"],
        }
        params = SamplingParams(
            temperature=0.7,
            seed=1,
            max_tokens=30,
            response_format={"type": "json_schema", "json_schema": {"name": "a", "schema": schema}},
        )
        q = [{"role": "user", "content": "What is 2 + 2?"}]
        for cand in embedded.sample_sync(q, params, k=2):
            assert cand.constraint == "strict", cand.notes
            value = json.loads(cand.text)
            assert isinstance(value["answer"], int)

    def test_tool_call_is_constrained_to_the_schema(self, embedded):
        q = [{"role": "user", "content": "What is 17*23? Use the calculator."}]
        params = SamplingParams(temperature=0.0, max_tokens=40, tools=(CALC,))
        [cand] = embedded.sample_sync(q, params)
        assert cand.constraint == "strict" and cand.finish_reason == "tool_calls", cand.notes
        [call] = cand.tool_calls
        assert call.name == "calculator" and isinstance(call.arguments()["expression"], str)

    def test_output_cut_by_max_tokens_is_returned_as_it_is_not_relaxed(self, embedded):
        # Four tokens cannot hold a complete tool call: a looser grammar cannot make it fit, and another
        # decode would spend past the caller's limit.
        q = [{"role": "user", "content": "What is 17*23?"}]
        params = SamplingParams(temperature=0.5, seed=2, max_tokens=4, tools=(CALC,))
        [cand] = embedded.sample_sync(q, params)
        assert cand.constraint == "strict" and cand.tool_calls == ()
        assert cand.finish_reason == "length"
        assert not any("relaxed" in n for n in cand.notes)
        assert "cut at max_tokens; not decoded again" in cand.notes
        assert cand.usage.output_tokens == 4  # one decode

    def test_output_cut_by_the_cut_bound_is_not_decoded_again(self, embedded):
        # The stopping rule asked for this sample to end once its tokens grow unlikely: another decode
        # under a looser grammar would spend what the cut saved.
        q = [{"role": "user", "content": "What is 17*23?"}]
        params = SamplingParams(temperature=0.5, seed=2, max_tokens=40, tools=(CALC,), cut_below=0.999)
        [cand] = embedded.sample_sync(q, params)
        assert cand.finish_reason == "cut" and cand.constraint == "strict"
        assert "cut at the cut bound; not decoded again" in cand.notes
        assert not any("relaxed" in n for n in cand.notes)
        assert cand.usage.output_tokens < 40

    def test_without_relaxing_only_strict_is_tried(self, gguf_path, embedded):
        backend = EmbeddedBackend(
            llama=embedded.llama, constraint=ConstraintPolicy(strict_attempts=1, relax=False)
        )
        params = SamplingParams(temperature=0.5, seed=2, max_tokens=4, tools=(CALC,))
        [cand] = backend.sample_sync([{"role": "user", "content": "17*23?"}], params)
        assert cand.constraint == "strict" and not any("relaxed" in n for n in cand.notes)

    def test_schema_the_grammar_cannot_express_goes_straight_to_lenient(self, embedded):
        bad = {"type": "object", "properties": {"x": {"type": "no-such-type"}}}
        params = SamplingParams(
            temperature=0.0,
            max_tokens=30,
            response_format={"type": "json_schema", "json_schema": {"name": "b", "schema": bad}},
        )
        [cand] = embedded.sample_sync([{"role": "user", "content": "Give x."}], params)
        assert cand.constraint == "lenient"
        assert cand.notes[0].startswith("strict grammar unusable: AssertionError")
        assert "relaxed strict -> lenient after 1 failed strict tries" in cand.notes[1]
        assert cand.text.startswith("{")  # decoded under the any-object grammar

    def test_concurrent_callers_are_serialised_by_the_lock(self, embedded):
        params = SamplingParams(temperature=0.0, max_tokens=8, logprobs=False)
        expected = embedded.sample_sync(Q, params)[0].text
        results: list[str] = []

        def worker() -> None:
            results.append(embedded.sample_sync(Q, params)[0].text)

        threads = [threading.Thread(target=worker) for _ in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert results == [expected] * 3

    def test_async_twin_matches_sync(self, embedded):
        params = SamplingParams(temperature=0.0, max_tokens=8)
        sync = embedded.sample_sync(Q, params)[0]
        [async_] = asyncio.run(embedded.sample(Q, params))
        assert async_.text == sync.text and async_.token_logprobs == pytest.approx(sync.token_logprobs)

    def test_prompt_longer_than_the_context_is_terminal(self, embedded):
        huge = [{"role": "user", "content": "word " * 3000}]
        with pytest.raises(TerminalBackendError, match="fills the context"):
            embedded.sample_sync(huge, SamplingParams(max_tokens=4))


class TestEmbeddedBackendConfig:
    def test_bad_settings_name_the_field(self):
        with pytest.raises(ValueError, match="n_ctx"):
            EmbeddedBackend(n_ctx=8)
        with pytest.raises(ValueError, match="n_threads"):
            EmbeddedBackend(n_threads=0)


@needs_llama
class TestEmbeddedCut:
    def test_a_sample_below_the_bound_is_cut_where_a_replay_cuts_it(self, embedded) -> None:
        messages = [{"role": "user", "content": "Write a long story about a dragon."}]
        params = SamplingParams(temperature=1.0, seed=1, max_tokens=64, cut_below=0.97)
        [cut] = embedded.sample_sync(messages, params)
        assert cut.finish_reason == "cut"
        assert cut.usage.output_tokens == len(cut.logprobs or ())
        assert cut_point(cut.token_logprobs or (), 0.97) == cut.usage.output_tokens
        [whole] = embedded.sample_sync(messages, SamplingParams(temperature=1.0, seed=1, max_tokens=64))
        assert whole.finish_reason != "cut"  # without a bound nothing is cut
