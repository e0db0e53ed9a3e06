"""What the gateway changes in a proxied body and answer: all-text content parts joined into one string
(other parts untouched), ``model`` said as the client's name in answers, stream chunks and errors. Over
real HTTP: the fault server on 127.0.0.1 recording what it was sent, and ``python -m llama_cpp.server``
(which answers a list of text parts with a 500) behind ``retryctl serve``."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from retryctl.gateway import Gateway, GatewayConfig
from retryctl.gateway._rewrite import renamed_events
from tests.gateway._support import call, serving
from tests.models._fault_server import FaultServer, raw, status
from tests.models.conftest import gguf_path, llama_server, needs_llama  # noqa: F401

TEXT_PARTS = [{"type": "text", "text": "Say"}, {"type": "text", "text": " hi"}]
IMAGE = {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}


def _gateway(server: FaultServer) -> Gateway:
    return Gateway(
        GatewayConfig(
            upstream=server.url, upstream_model="fault", model_name="m", retries=0, retry_wait_s=0.0
        )
    )


def _post(server: FaultServer, body: dict[str, Any]) -> httpx.Response:
    return call(_gateway(server), "POST", "/v1/chat/completions", {"model": "m", **body})


class TestTextParts:
    def test_all_text_parts_go_as_one_string(self, fault_server: FaultServer) -> None:
        messages = [
            {"role": "system", "content": [{"type": "text", "text": "Be brief."}]},
            {"role": "user", "content": TEXT_PARTS, "name": "u"},
        ]
        assert _post(fault_server, {"messages": messages}).status_code == 200
        (sent,) = fault_server.requests
        assert sent["messages"] == [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "Say hi", "name": "u"},
        ]

    def test_a_list_with_an_image_goes_untouched(self, fault_server: FaultServer) -> None:
        messages = [{"role": "user", "content": [*TEXT_PARTS, IMAGE]}]
        assert _post(fault_server, {"messages": messages}).status_code == 200
        (sent,) = fault_server.requests
        assert sent["messages"] == messages


class TestModelName:
    def test_a_plain_answer_says_the_clients_name(self, fault_server: FaultServer) -> None:
        response = _post(fault_server, {"messages": [{"role": "user", "content": "hi"}]})
        assert response.status_code == 200
        assert response.json()["model"] == "m"  # the fault server says "fault"

    def test_every_stream_chunk_says_the_clients_name(self, fault_server: FaultServer) -> None:
        chunk = {"id": "c1", "object": "chat.completion.chunk", "model": "fault", "choices": []}
        events = b"".join(b"data: " + json.dumps(chunk).encode() + b"\n\n" for _ in range(3))
        fault_server.script.append(raw(events + b"data: [DONE]\n\n", content_type="text/event-stream"))
        body = {"messages": [{"role": "user", "content": "hi"}], "stream": True}
        response = _post(fault_server, body)
        lines = [line for line in response.text.splitlines() if line.startswith("data: ")]
        assert lines[-1] == "data: [DONE]"
        assert [json.loads(line[6:])["model"] for line in lines[:-1]] == ["m", "m", "m"]

    def test_an_error_names_the_clients_name_not_the_upstreams(self, fault_server: FaultServer) -> None:
        fault_server.script.append(status(503))
        response = _post(fault_server, {"messages": [{"role": "user", "content": "hi"}]})
        assert response.status_code == 502
        message = response.json()["error"]["message"]
        assert "upstream m:" in message and "fault" not in message

    def test_a_line_split_over_reads_is_renamed_whole(self) -> None:
        whole = b'data: {"model": "/srv/x.gguf", "choices": []}\r\n\r\ndata: [DONE]\r\n\r\n'

        async def pieces() -> AsyncIterator[bytes]:
            for i in range(0, len(whole), 7):
                yield whole[i : i + 7]

        async def collect() -> bytes:
            return b"".join([part async for part in renamed_events(pieces(), "m")])

        out = asyncio.run(collect())
        assert out == b'data: {"model":"m","choices":[]}\r\n\r\ndata: [DONE]\r\n\r\n'


@needs_llama
def test_llama_cpp_server_answers_text_parts_under_the_clients_name(request: pytest.FixtureRequest) -> None:
    upstream = str(request.getfixturevalue("llama_server"))
    args = ("--upstream", upstream, "--upstream-model", "smollm2", "--model-name", "chat")
    with serving(*args) as (url, _):
        body = {"model": "chat", "messages": [{"role": "user", "content": TEXT_PARTS}], "max_tokens": 4}
        response = httpx.post(url + "/chat/completions", json=body, timeout=120)
        assert response.status_code == 200, response.text
        assert response.json()["model"] == "chat"
        assert response.json()["choices"][0]["message"]["content"]
