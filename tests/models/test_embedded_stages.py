"""Staged samples on the real embedded model: each stage continues the KV cache of the ones before."""

from __future__ import annotations

import pytest

from retryctl.exceptions import ConfigError
from retryctl.models import SamplingParams, Stage
from tests.models.conftest import needs_llama

Q = [{"role": "user", "content": "What is 12 + 7? Think it through, then answer."}]
THINK = Stage(name="think", temperature=0.0, max_tokens=24, start="<think>\n", end=("</think>",))
ANSWER = Stage(
    name="answer", temperature=1.0, top_p=1.0, top_k=1000, min_p=0.0, max_tokens=12, start="\nAnswer:"
)


@needs_llama
class TestStagedSamplingOnTheEmbeddedModel:
    def test_a_greedy_think_stage_is_the_same_across_seeds_while_the_answer_stage_varies(self, embedded):
        # llama.cpp's greedy choice can change with how the prompt was batched (a near tie, "= 8" or
        # "= 9", flips between one batch of the whole prompt and a cached prefix): one staged sample
        # first, so that every sample below reads the same cached prefix (docs/models.md).
        embedded.sample_sync(Q, SamplingParams(seed=0, stages=(THINK, ANSWER)))
        cands = [
            c
            for seed in (1, 2, 3, 4)
            for c in embedded.sample_sync(Q, SamplingParams(seed=seed, stages=(THINK, ANSWER)))
        ]
        thinks = {c.stages[0].text for c in cands}
        answers = {c.stages[1].text for c in cands}
        assert len(thinks) == 1
        assert len(answers) > 1

    def test_stages_make_up_the_candidate(self, embedded):
        [cand] = embedded.sample_sync(Q, SamplingParams(seed=5, stages=(THINK, ANSWER), top_logprobs=2))
        think, answer = cand.stages
        assert [s.name for s in cand.stages] == ["think", "answer"]
        assert cand.text == think.text + answer.text
        assert think.text.startswith("<think>\n") and answer.text.startswith("\nAnswer:")
        assert cand.usage.output_tokens == think.tokens + answer.tokens
        assert cand.logprobs is not None and len(cand.logprobs) == think.tokens + answer.tokens
        assert cand.finish_reason == answer.finish_reason

    def test_a_stage_cut_by_its_cap_is_closed_with_its_first_end_string(self, embedded):
        think = Stage(
            name="think", temperature=0.0, max_tokens=6, start="<think>\n", end=("</think>", "</t>")
        )
        [cand] = embedded.sample_sync(Q, SamplingParams(seed=1, stages=(think, ANSWER)))
        assert cand.stages[0].finish_reason == "length" and cand.stages[0].tokens == 6
        assert cand.stages[0].text.endswith("</think>")

    def test_the_second_stage_continues_the_first_token_for_token(self, embedded):
        # Greedy decoding split in two stages (no delimiters) is greedy decoding in one run: the second
        # stage continues from exactly the state the first left, not from a re-read of its text.
        whole = embedded.sample_sync(Q, SamplingParams(temperature=0.0, max_tokens=30, seed=1))[0]
        first, second = Stage(name="a", max_tokens=12), Stage(name="b", max_tokens=18)
        staged = embedded.sample_sync(Q, SamplingParams(temperature=0.0, seed=1, stages=(first, second)))[0]
        assert whole.finish_reason == "length"  # else the split would not be at token 12
        assert staged.text == whole.text
        assert [s.tokens for s in staged.stages] == [12, 18]

    def test_a_later_stage_evaluates_only_what_was_added_not_the_prompt(self, embedded):
        [cand] = embedded.sample_sync(Q, SamplingParams(seed=2, stages=(THINK, ANSWER)))
        llm = embedded.llama
        added = len(llm.tokenize(b"</think>", add_bos=False, special=True)) + len(
            llm.tokenize(b"\nAnswer:", add_bos=False, special=True)
        )
        prompt = len(llm.tokenize(embedded.render_prompt(Q).encode(), add_bos=False, special=True))
        opening = len(llm.tokenize(b"<think>\n", add_bos=False, special=True))
        think, answer = cand.stages
        assert think.prompt_tokens is not None and answer.prompt_tokens is not None
        # The last think token was sampled, never evaluated: it is read with the added text.
        assert answer.prompt_tokens <= added + 1 < prompt
        # Billed: the prompt once and the texts the stages put in, not the model's own tokens again.
        assert cand.usage.input_tokens == prompt + opening + added

    def test_cut_below_watches_across_stages_and_ends_the_sample(self, embedded):
        think = Stage(name="think", temperature=1.0, top_k=1000, top_p=1.0, min_p=0.0, max_tokens=40)
        params = SamplingParams(seed=3, stages=(think, ANSWER), cut_below=0.99)
        [cand] = embedded.sample_sync(Q, params)
        assert cand.finish_reason == "cut" and len(cand.stages) == 1
        assert cand.stages[0].tokens == 16  # the cut window: the first window below the bound

    def test_the_draws_stop_strings_apply_to_the_last_stage_only(self, embedded):
        answer = Stage(name="answer", temperature=0.0, max_tokens=20, start="\nAnswer:")
        [cand] = embedded.sample_sync(Q, SamplingParams(seed=1, stages=(THINK, answer), stop=("1",)))
        assert "1" in cand.stages[0].text  # the think stage ran past "1" (it says "12 + 7")
        assert "1" not in cand.stages[1].text and cand.stages[1].finish_reason == "stop"

    def test_structured_output_is_not_staged(self, embedded):
        params = SamplingParams(stages=(THINK, ANSWER), response_format={"type": "json_object"})
        with pytest.raises(ConfigError) as err:
            embedded.sample_sync(Q, params)
        assert err.value.field == "stages"

    def test_an_end_string_that_ends_inside_a_token_is_kept_and_the_next_stage_continues_after_it(
        self, embedded
    ):
        # "Th" ends inside the token "This": the text keeps "Th", the cache is given the tokens of
        # "Th" in place of "This", and the next stage goes on from there.
        think = Stage(name="think", temperature=0.0, max_tokens=30, start="<think>\n", end=("Th",))
        answer = Stage(name="answer", temperature=0.0, max_tokens=4)
        [cand] = embedded.sample_sync(Q, SamplingParams(seed=1, stages=(think, answer)))
        first, second = cand.stages
        assert first.finish_reason == "stop" and first.text.endswith("Th")
        assert not second.text.startswith("is")  # not "This" again: it continues "Th..."
        assert cand.text == first.text + second.text
