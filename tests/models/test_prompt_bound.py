"""The reservation's prompt bound against what the embedded model (a real tokenizer and chat template)
counts: a draw that reserved less than it used would let a token budget leak into ``overrun``."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from retryctl.controller import Budget, Ledger, ManualClock
from retryctl.models import SamplingParams
from retryctl.models._prompt_bound import prompt_tokens_bound
from retryctl.nodes._sampling import DrawRequest, _actual, _estimate
from tests.models.conftest import needs_llama

PROMPTS: dict[str, list[dict[str, str]]] = {
    "a greeting (the template's default system prompt dominates)": [{"role": "user", "content": "hi"}],
    "a system prompt and a question": [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "What is 6 times 7?"},
    ],
    "a word problem": [
        {
            "role": "user",
            "content": "A shop has 17 boxes with 23 pens in each box. It sells 2 pens. How many are left?",
        }
    ],
    "numbers, one token a digit and a space": [
        {"role": "user", "content": " ".join(str(i) for i in range(100, 160))}
    ],
    "CJK text": [{"role": "user", "content": "日本語のテキストです。東京は日本の首都です。"}],
    "emoji": [{"role": "user", "content": "🙂🙃😉😊😇🥰😍🤩😘😗"}],
    "accents": [{"role": "user", "content": "naïve café ünïcödé façade déjà vu Ærøskøbing"}],
    "punctuation": [{"role": "user", "content": "!!!???...;;;:::{{{}}}[[[]]]|||@@@###$$$%%%^^^"}],
    "code": [{"role": "user", "content": "def f(x):\n    return {k: v**2 for k, v in x.items() if v % 3}\n"}],
    "a conversation": [
        {"role": "system", "content": "You are a careful assistant."},
        {"role": "user", "content": "What is 12 + 30?"},
        {"role": "assistant", "content": "42."},
        {"role": "user", "content": "And times 2?"},
    ],
}


@needs_llama
class TestAgainstTheEmbeddedModel:
    @pytest.mark.parametrize("messages", list(PROMPTS.values()), ids=list(PROMPTS))
    def test_the_bound_is_at_least_what_the_model_counts(
        self, embedded: Any, messages: list[dict[str, str]]
    ) -> None:
        [drawn] = asyncio.run(embedded.sample(messages, SamplingParams(temperature=0.7, max_tokens=2), k=1))
        assert prompt_tokens_bound([m["content"] for m in messages]) >= drawn.usage.input_tokens > 0

    def test_a_draw_charges_its_tokens_in_full(self, embedded: Any) -> None:
        # What the sampling loop reserves for a draw of k samples, committed with what they used:
        # nothing passes the reservation, so the ledger's totals are the model's own counts.
        messages = PROMPTS["a greeting (the template's default system prompt dominates)"]
        request = DrawRequest(3, SamplingParams(temperature=0.7, max_tokens=4))
        ledger = Ledger(Budget(input_tokens=10_000, output_tokens=10_000), clock=ManualClock())
        held = ledger.reserve(_estimate(messages, request, "smollm2", None))
        drawn = asyncio.run(embedded.sample(messages, request.params, k=request.k))
        ledger.commit(held, _actual(drawn, "smollm2", None))
        snapshot = ledger.snapshot()
        assert snapshot.used["input_tokens"] == sum(c.usage.input_tokens for c in drawn)
        assert snapshot.overrun["input_tokens"] == 0 and snapshot.overrun["output_tokens"] == 0


class TestTheBound:
    def test_a_letter_costs_half_a_token_and_anything_else_its_bytes(self) -> None:
        base = prompt_tokens_bound([""])
        assert prompt_tokens_bound(["abcd"]) - base == 2
        assert prompt_tokens_bound(["1234"]) - base == 4
        assert prompt_tokens_bound(["日本"]) - base == 6  # three UTF-8 bytes each

    def test_each_message_adds_its_markers(self) -> None:
        assert prompt_tokens_bound(["a", "a"]) > prompt_tokens_bound(["aa"])
