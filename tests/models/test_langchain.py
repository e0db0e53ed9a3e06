"""LangChainBackend: mapping of LangChain replies onto candidates, and ChatOpenAI on a real server."""

from __future__ import annotations

import asyncio
import importlib.util
import math
from typing import Any

import pytest
from langchain_core.language_models.fake_chat_models import (
    FakeListChatModel,
    GenericFakeChatModel,
)
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage

from retryctl.models import (
    BackendTimeout,
    LangChainBackend,
    SamplingParams,
    TerminalBackendError,
    ToolSpec,
    TransientBackendError,
    openai_style_kwargs,
    stop_only_kwargs,
)
from retryctl.models._errors import UnclassifiedBackendError
from retryctl.models._langchain import _classify
from tests.models._fault_server import FaultServer, ok, status
from tests.models.conftest import needs_llama

Q = [{"role": "user", "content": "What is 6*7?"}]


class TestLangChainBackend:
    def test_k_candidates_from_a_list_model(self):
        backend = LangChainBackend(FakeListChatModel(responses=["41", "42", "43"]))
        cands = backend.sample_sync(Q, k=3)
        assert sorted(c.text for c in cands) == ["41", "42", "43"]
        assert all(c.logprobs is None and c.model == "langchain:fake-list-chat-model" for c in cands)

    def test_logprobs_usage_tool_calls_and_finish_reason_are_mapped(self):
        reply = AIMessage(
            content=[{"type": "text", "text": "forty"}, {"type": "text", "text": "-two"}],
            tool_calls=[{"name": "calc", "args": {"expression": "6*7"}, "id": "t1"}],
            usage_metadata={"input_tokens": 12, "output_tokens": 3, "total_tokens": 15},
            response_metadata={
                "finish_reason": "tool_calls",
                "logprobs": {
                    "content": [
                        {"token": "forty", "logprob": -0.5, "top_logprobs": [
                            {"token": "forty", "logprob": -0.5}, {"token": "42", "logprob": -1.5}]},
                        {"token": "-two", "logprob": -0.1, "top_logprobs": []},
                    ]
                },
            },
        )  # fmt: skip
        backend = LangChainBackend(GenericFakeChatModel(messages=iter([reply])), name="fake")
        [cand] = asyncio.run(backend.sample(Q))
        assert cand.text == "forty-two" and cand.finish_reason == "tool_calls"
        assert cand.token_logprobs == (-0.5, -0.1)
        assert cand.logprobs is not None and cand.logprobs[0].top[1] == ("42", -1.5)
        assert cand.usage.input_tokens == 12 and cand.usage.output_tokens == 3
        [call] = cand.tool_calls
        assert call.name == "calc" and call.arguments() == {"expression": "6*7"} and call.id == "t1"

    def test_odd_logprobs_metadata_gives_none_not_an_error(self):
        reply = AIMessage(content="x", response_metadata={"logprobs": [{"token": "x"}]})
        backend = LangChainBackend(GenericFakeChatModel(messages=iter([reply])))
        [cand] = backend.sample_sync(Q)
        assert cand.logprobs is None

    def test_langchain_messages_are_passed_through(self):
        model = FakeListChatModel(responses=["ok"])
        backend = LangChainBackend(model)
        msgs = [SystemMessage("be brief"), HumanMessage("hi")]
        [cand] = backend.sample_sync(msgs)
        assert cand.text == "ok"

    def test_model_without_tool_binding_is_a_terminal_error(self):
        backend = LangChainBackend(FakeListChatModel(responses=["x"]))
        params = SamplingParams(tools=(ToolSpec(name="calc"),))
        with pytest.raises(TerminalBackendError, match="cannot bind tools"):
            backend.sample_sync(Q, params)

    def test_kwarg_mappers(self):
        params = SamplingParams(temperature=0.2, top_p=0.5, stop=("\n",), max_tokens=9, top_logprobs=2)
        assert stop_only_kwargs(params, 3) == {"stop": ["\n"]}
        kwargs = openai_style_kwargs(params, 3)
        assert kwargs == {
            "temperature": 0.2, "max_tokens": 9, "seed": 3, "top_p": 0.5,
            "logprobs": True, "top_logprobs": 2, "stop": ["\n"],
        }  # fmt: skip

    def test_errors_are_classified(self):
        assert isinstance(_classify(TimeoutError("slow"), "b"), BackendTimeout)
        assert isinstance(_classify(ConnectionResetError("gone"), "b"), TransientBackendError)
        odd = RuntimeError("boom")
        assert type(_classify(odd, "b")) is UnclassifiedBackendError

        class Status(Exception):
            status_code = 503

        err = _classify(Status("busy"), "b")
        assert isinstance(err, TransientBackendError) and err.status_code == 503


class TestOutputTokenLimit:
    """The output limit a chat model was built with, under the names chat model classes give it."""

    @pytest.mark.parametrize(
        ("fields", "limit"),
        [
            ({"max_tokens": 200}, 200),  # ChatOpenAI, ChatAnthropic, ChatMistralAI...
            ({"max_output_tokens": 300}, 300),  # ChatGoogleGenerativeAI
            ({"num_predict": 64}, 64),  # ChatOllama
            ({"num_predict": -1}, None),  # Ollama's "no limit"
            ({"max_tokens": None, "model_kwargs": {"max_tokens": 90}}, 90),
            ({"max_tokens": True}, None),
            ({}, None),
        ],
    )
    def test_read_by_name(self, fields: dict[str, Any], limit: int | None) -> None:
        from types import SimpleNamespace

        from retryctl.models._output_limit import output_token_limit

        assert output_token_limit(SimpleNamespace(**fields)) == limit

    def test_chat_openai_built_with_max_tokens(self) -> None:
        chat_openai = pytest.importorskip("langchain_openai").ChatOpenAI
        model = chat_openai(model="m", api_key="unused", base_url="http://127.0.0.1:9/v1", max_tokens=200)
        assert LangChainBackend(model).output_limit(SamplingParams()) == 200


@needs_llama
@pytest.mark.skipif(
    importlib.util.find_spec("langchain_openai") is None, reason="langchain-openai not installed"
)
class TestLangChainBackendWithChatOpenAI:
    def test_chat_openai_on_the_local_server_gives_logprobs(self, llama_server):
        chat_openai: Any = importlib.import_module("langchain_openai").ChatOpenAI
        model = chat_openai(model="smollm2", base_url=llama_server, api_key="none", max_retries=0)
        backend = LangChainBackend(model, to_kwargs=openai_style_kwargs)
        params = SamplingParams(temperature=0.0, max_tokens=8, seed=1, top_logprobs=2)
        [cand] = backend.sample_sync([{"role": "user", "content": "Name a colour."}], params)
        assert cand.text and cand.model == "langchain:smollm2"
        assert cand.logprobs is not None and len(cand.logprobs) > 0
        assert all(t.logprob <= 0 and math.isfinite(t.logprob) for t in cand.logprobs)
        assert cand.usage.input_tokens > 0

    def test_one_sample_is_one_http_try_whatever_the_clients_max_retries(self):
        """ChatOpenAI's own retries (2 by default) would make one failed sample three requests and
        their waits, unseen by the step's ledger and log: the backend calls a copy without them."""
        from langchain_openai import ChatOpenAI
        from pydantic import SecretStr

        server = FaultServer(default=status(503)).start()
        try:
            model = ChatOpenAI(
                model="m", base_url=server.url, api_key=SecretStr("k"), max_retries=2, timeout=5
            )
            backend = LangChainBackend(model, to_kwargs=openai_style_kwargs)
            with pytest.raises(TransientBackendError):
                backend.sample_sync([{"role": "user", "content": "hi"}], SamplingParams(max_tokens=8))
            assert len(server.requests) == 1
            assert model.max_retries == 2 and model.root_client.max_retries == 2  # the user's, unchanged
            server.script.append(ok())
            [cand] = backend.sample_sync([{"role": "user", "content": "hi"}], SamplingParams(max_tokens=8))
            assert cand.text == "42-0" and len(server.requests) == 2
        finally:
            server.stop()
