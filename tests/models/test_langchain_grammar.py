"""LangChainBackend and ``SamplingParams.grammar``: a LangChain model takes none in general (the candidate
says so and the check runs after decoding); ``llama_cpp_style_kwargs`` sends it to a llama.cpp server
through ChatOpenAI's ``extra_body``, where a real ``python -m llama_cpp.server`` honours it."""

from __future__ import annotations

import importlib
import importlib.util
from typing import Any

import httpx
import pytest
from langchain_core.language_models.fake_chat_models import FakeListChatModel

from retryctl.models import (
    Grammar,
    LangChainBackend,
    SamplingParams,
    llama_cpp_style_kwargs,
    openai_style_kwargs,
)
from tests.models._fault_server import FaultServer
from tests.models.conftest import needs_llama

Q = [{"role": "user", "content": "Is the sky blue? Answer yes or no."}]
YES_NO = Grammar(name="yes-no", gbnf='root ::= "yes" | "no"')
SCHEMA = {"type": "object", "properties": {"a": {"type": "string"}}}
needs_chat_openai = pytest.mark.skipif(
    importlib.util.find_spec("langchain_openai") is None, reason="langchain-openai not installed"
)


class TestLangChainGrammar:
    def test_a_model_that_takes_no_grammar_says_so(self):
        backend = LangChainBackend(FakeListChatModel(responses=["Yes, it is."]))
        [cand] = backend.sample_sync(Q, SamplingParams(grammar=YES_NO))
        assert cand.grammar is None
        assert cand.notes == ("grammar 'yes-no' not supported by this backend: checked after decoding",)

    def test_no_grammar_no_note(self):
        [cand] = LangChainBackend(FakeListChatModel(responses=["yes"])).sample_sync(Q)
        assert cand.grammar is None and cand.notes == ()

    def test_llama_cpp_style_kwargs_put_the_gbnf_in_extra_body(self):
        fmt = {"type": "json_object"}
        kwargs = llama_cpp_style_kwargs(SamplingParams(grammar=YES_NO, response_format=fmt), 7)
        assert kwargs["extra_body"] == {"grammar": YES_NO.gbnf} and "response_format" not in kwargs
        assert {k: v for k, v in kwargs.items() if k != "extra_body"} == {
            k: v for k, v in openai_style_kwargs(SamplingParams(), 7).items() if k != "response_format"
        }

    @needs_llama
    def test_a_regex_is_sent_as_gbnf(self):
        kwargs = llama_cpp_style_kwargs(SamplingParams(grammar=Grammar(name="d", regex=r"\d+")), None)
        assert kwargs["extra_body"] == {"grammar": "root ::= [0-9]+"}

    @needs_llama
    def test_a_gbnf_llama_cpp_cannot_parse_is_not_sent(self):
        broken = Grammar(name="broken", gbnf='root ::= "yes')
        assert "extra_body" not in llama_cpp_style_kwargs(SamplingParams(grammar=broken), None)
        backend = LangChainBackend(FakeListChatModel(responses=["yes"]), to_kwargs=llama_cpp_style_kwargs)
        [cand] = backend.sample_sync(Q, SamplingParams(grammar=broken))
        assert cand.grammar is None and "not supported by this backend" in cand.notes[0]

    def test_a_json_schema_grammar_is_not_sent(self):
        kwargs = llama_cpp_style_kwargs(SamplingParams(grammar=Grammar(name="j", json_schema=SCHEMA)), None)
        assert "extra_body" not in kwargs


@needs_chat_openai
class TestChatOpenAIGrammar:
    @needs_llama
    def test_the_llama_cpp_server_honours_it_on_every_sample(self, llama_server):
        chat_openai: Any = importlib.import_module("langchain_openai").ChatOpenAI
        # Its own HTTP client: langchain-openai shares one per base URL, and an async one is bound to
        # the event loop that first used it (each sample_sync runs its own loop).
        model = chat_openai(
            model="smollm2",
            base_url=llama_server,
            api_key="none",
            max_retries=0,
            http_async_client=httpx.AsyncClient(),
        )
        backend = LangChainBackend(model, to_kwargs=llama_cpp_style_kwargs)
        params = SamplingParams(grammar=YES_NO, temperature=1.5, max_tokens=6, seed=2, logprobs=False)
        cands = backend.sample_sync(Q, params, k=5)
        assert [c.text for c in cands if c.text not in ("yes", "no")] == []
        assert all(c.grammar == "yes-no" for c in cands)

    def test_the_grammar_reaches_the_request_body(self):
        from pydantic import SecretStr

        chat_openai: Any = importlib.import_module("langchain_openai").ChatOpenAI
        server = FaultServer().start()
        try:
            model = chat_openai(model="m", base_url=server.url, api_key=SecretStr("k"), max_retries=0)
            backend = LangChainBackend(model, to_kwargs=llama_cpp_style_kwargs)
            backend.sample_sync(Q, SamplingParams(grammar=YES_NO, max_tokens=4))
        finally:
            server.stop()
        assert server.requests[0]["grammar"] == YES_NO.gbnf
