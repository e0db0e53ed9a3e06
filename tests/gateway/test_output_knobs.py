"""The request's output knobs reach every sample, in every mode: ``response_format`` and ``stop`` under
adaptive sampling (embedded over real HTTP, upstream as the fault server records what it was sent), an
adaptive stream's usage chunk, and a structured answer cut by ``max_tokens`` decoded once."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from retryctl.gateway import EmbeddedUpstream, Gateway, GatewayConfig
from retryctl.models import ScriptedBackend
from tests.gateway._support import adaptive, call, config, serving
from tests.models._fault_server import FaultServer
from tests.models.conftest import needs_llama

SUM = [{"role": "user", "content": "What is 2 + 3? Reply in JSON."}]
WEATHER = {
    "type": "function",
    "function": {
        "name": "weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}


@pytest.fixture(scope="module")
def embedded() -> Iterator[str]:
    """``retryctl serve --embedded``; its /v1 URL."""
    with serving("--embedded", "--calibration", "none") as (url, _):
        yield url


def _post(url: str, body: dict[str, Any]) -> httpx.Response:
    return httpx.post(url + "/chat/completions", json={"model": "smollm2", **body}, timeout=300)


def _events(response: httpx.Response) -> list[dict[str, Any]]:
    lines = [line for line in response.text.splitlines() if line.startswith("data: ")]
    assert lines[-1] == "data: [DONE]"
    return [json.loads(line.removeprefix("data: ")) for line in lines[:-1]]


@needs_llama
class TestEmbedded:
    def test_every_adaptive_sample_is_json_under_json_object(self, embedded: str) -> None:
        body = {
            "messages": SUM,
            "max_tokens": 48,
            "temperature": 0.7,
            "seed": 3,
            "adaptive": True,
            "retryctl": {"min_samples": 3, "max_samples": 3, "answer": "text"},
            "response_format": {"type": "json_object"},
        }
        response = _post(embedded, body)
        assert response.status_code == 200, response.text
        done = response.json()
        assert done["choices"][0]["finish_reason"] == "stop"
        json.loads(done["choices"][0]["message"]["content"])
        answers = [c["answer"] for c in done["retryctl"]["candidates"]]
        assert sum(c["count"] for c in done["retryctl"]["candidates"]) == 3
        for answer in answers:
            json.loads(answer)  # every sample, not only the chosen one

    def test_a_json_answer_cut_by_max_tokens_is_decoded_once(self, embedded: str) -> None:
        body = {"messages": SUM, "max_tokens": 8, "response_format": {"type": "json_object"}, "seed": 1}
        done = _post(embedded, body).json()
        assert done["choices"][0]["finish_reason"] == "length"
        assert done["usage"]["completion_tokens"] <= 8

    def test_a_tool_call_cut_by_max_tokens_is_decoded_once(self, embedded: str) -> None:
        ask = [{"role": "user", "content": "What is the weather in Paris?"}]
        done = _post(embedded, {"messages": ask, "max_tokens": 8, "tools": [WEATHER], "seed": 1}).json()
        assert done["choices"][0]["finish_reason"] == "length"
        assert done["usage"]["completion_tokens"] <= 8


class TestAdaptiveStream:
    def _gateway(self) -> Gateway:
        backend = ScriptedBackend(["42", "42", "42"], confidence=0.95)
        return Gateway(config(), upstream=EmbeddedUpstream(backend, name="scripted"))

    def test_include_usage_adds_a_usage_chunk_before_done(self) -> None:
        body = {**adaptive(max_samples=3), "stream": True, "stream_options": {"include_usage": True}}
        events = _events(call(self._gateway(), "POST", "/v1/chat/completions", body))
        last = events[-1]
        assert last["choices"] == [] and last["object"] == "chat.completion.chunk"
        usage = last["usage"]
        assert usage["completion_tokens"] > 0
        assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]
        assert "retryctl" in events[-2]  # the finish chunk still carries the block

    def test_without_it_no_usage_chunk(self) -> None:
        body = {**adaptive(max_samples=3), "stream": True}
        events = _events(call(self._gateway(), "POST", "/v1/chat/completions", body))
        assert all(e["choices"] for e in events)


class TestUpstreamAdaptive:
    def test_every_call_carries_the_response_format_and_stop(self, fault_server: FaultServer) -> None:
        gateway = Gateway(
            GatewayConfig(upstream=fault_server.url, upstream_model="fault", model_name="m", retry_wait_s=0.0)
        )
        body = {
            **adaptive(model="m", min_samples=2, max_samples=2, answer="text"),
            "response_format": {"type": "json_object"},
            "stop": ["END"],
        }
        response = call(gateway, "POST", "/v1/chat/completions", body)
        assert response.status_code == 200, response.text
        assert fault_server.requests
        for sent in fault_server.requests:
            assert sent["response_format"] == {"type": "json_object"}
            assert sent["stop"] == ["END"]


class TestJsonVotes:
    def _decided(self, texts: list[str], **extra: Any) -> dict[str, Any]:
        backend = ScriptedBackend(texts, confidence=0.95)
        gateway = Gateway(config(), upstream=EmbeddedUpstream(backend, name="scripted"))
        body = {**adaptive(min_samples=3, max_samples=3), "response_format": {"type": "json_object"}, **extra}
        response = call(gateway, "POST", "/v1/chat/completions", body)
        assert response.status_code == 200, response.text
        block: dict[str, Any] = response.json()["retryctl"]
        return block

    def test_spread_out_objects_vote_on_their_value_not_their_last_line(self) -> None:
        texts = ['{\n  "sum": 5\n}', '{\n  "sum": 6\n}', '{\n  "sum": 7\n}']
        block = self._decided(texts)
        assert len(block["candidates"]) == 3  # under "auto" all three would be "}"
        assert block["verdict"] == "stop"

    def test_two_spellings_of_one_object_agree(self) -> None:
        block = self._decided(['{"a": 1, "b": 2}', '{\n "b": 2,\n "a": 1\n}', '{"b":2,"a":1}'])
        assert block["candidates"] == [{"answer": '{"a":1,"b":2}', "count": 3, "confidence": 1.0}]

    def test_an_explicit_answer_setting_is_kept(self) -> None:
        block = self._decided(
            ['{\n  "sum": 5\n}', '{\n  "sum": 6\n}', '{\n  "sum": 7\n}'],
            retryctl={"min_samples": 3, "max_samples": 3, "answer": "last_line"},
        )
        assert [c["answer"] for c in block["candidates"]] == ["}"]
