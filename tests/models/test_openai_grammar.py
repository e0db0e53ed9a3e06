"""OpenAIBackend decoding under ``SamplingParams.grammar``: a real ``python -m llama_cpp.server`` honours
a GBNF grammar on every sample; real test servers on 127.0.0.1 record what each dialect sends, refuse
the grammar field (dropped, remembered, noted) or ignore it (caught by the regex check)."""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from retryctl.exceptions import ConfigError
from retryctl.models import CapabilityRegistry, Grammar, OpenAIBackend, SamplingParams
from retryctl.models._openai_grammar import grammar_plan
from tests.models._picky_server import LLAMA_CPP_JSON_SCHEMA_500, PickyServer, Refusal, mode_of
from tests.models.conftest import needs_llama

Q = [{"role": "user", "content": "Is the sky blue? Answer yes or no."}]
YES_NO = Grammar(name="yes-no", gbnf='root ::= "yes" | "no"', description="yes or no")
SUM = Grammar(name="sum", regex=r"\d{1,2} [+*-] \d{1,2}")
SCHEMA = {"type": "object", "properties": {"answer": {"type": "string"}}, "required": ["answer"]}
ANSWER = Grammar(name="answer obj", json_schema=SCHEMA)
NOT_HONOURED = "grammar 'yes-no' not honoured by the server: checked after decoding"
# What a FastAPI server with ``extra="forbid"`` answers to a field it does not know.
GRAMMAR_400 = json.dumps(
    {
        "detail": [
            {
                "type": "extra_forbidden",
                "loc": ["body", "grammar"],
                "msg": "Extra inputs are not permitted",
                "input": 'root ::= "yes" | "no"',
            }
        ]
    }
)


def params(grammar: Grammar | None, **kwargs: Any) -> SamplingParams:
    base: dict[str, Any] = {"temperature": 1.0, "max_tokens": 8, "seed": 5, "logprobs": False}
    return SamplingParams(grammar=grammar, **{**base, **kwargs})


@pytest.fixture
def picky() -> Iterator[Callable[..., PickyServer]]:
    started: list[PickyServer] = []

    def start(
        refuse: Callable[[dict[str, Any]], Refusal | None] = lambda r: None,
        reply: Callable[[dict[str, Any]], str] = lambda r: "yes",
    ) -> PickyServer:
        server = PickyServer(refuse, reply).start()
        started.append(server)
        return server

    yield start
    for server in started:
        server.stop()


def backend(server: PickyServer, **kwargs: Any) -> OpenAIBackend:
    return OpenAIBackend(model="m", base_url=server.url, capabilities=CapabilityRegistry(), **kwargs)


@needs_llama
class TestOnLlamaServer:
    def test_gbnf_grammar_is_honoured_on_every_sample(self, llama_server):
        b = OpenAIBackend(model="smollm2", base_url=llama_server, timeout_s=120, capabilities=CapabilityRegistry())
        cands = b.sample_sync(Q, params(YES_NO, max_tokens=6, temperature=1.5), k=6)
        assert [c.text for c in cands if c.text not in ("yes", "no")] == []
        assert all(c.grammar == "yes-no" for c in cands)
        assert b.capabilities.refused == frozenset()

    def test_regex_grammar_is_converted_and_honoured(self, llama_server):
        b = OpenAIBackend(model="smollm2", base_url=llama_server, timeout_s=120, capabilities=CapabilityRegistry())
        ask = [{"role": "user", "content": "Write a sum of two numbers."}]
        cands = b.sample_sync(ask, params(SUM, max_tokens=12), k=4)
        assert all(re.fullmatch(SUM.regex or "", c.text) for c in cands), [c.text for c in cands]
        assert all(c.grammar == "sum" for c in cands)

    def test_without_grammar_the_model_writes_freely(self, llama_server):
        # The control: the same prompt unconstrained is not "yes"/"no" on every sample.
        b = OpenAIBackend(model="smollm2", base_url=llama_server, timeout_s=120, capabilities=CapabilityRegistry())
        cands = b.sample_sync(Q, params(None, max_tokens=6, temperature=1.5), k=4)
        assert any(c.text not in ("yes", "no") for c in cands)
        assert all(c.grammar is None for c in cands)
