"""The gateway's routes in this process (httpx's ASGI transport) around a scripted backend: the wire
format, the error shapes, backpressure. The HTTP paths to real servers are in test_proxy.py and
test_real_server.py."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
from starlette.requests import ClientDisconnect

from retryctl.audit import DecisionLog, verify_log
from retryctl.gateway import EmbeddedUpstream, Gateway, create_app
from retryctl.gateway._app import _Passed
from retryctl.gateway._upstream import Forwarded
from retryctl.models import ScriptedBackend
from tests.gateway._support import adaptive, call, chat, config


def _gateway(script: list[str], *, log: DecisionLog | None = None, **kwargs: object) -> Gateway:
    backend = ScriptedBackend(script, confidence=0.95)
    return Gateway(config(**kwargs), upstream=EmbeddedUpstream(backend, name="scripted"), log=log)


class TestRoutes:
    def test_models_lists_the_served_model(self) -> None:
        response = call(_gateway([]), "GET", "/v1/models")
        assert response.status_code == 200
        assert [m["id"] for m in response.json()["data"]] == ["scripted"]

    def test_an_unknown_model_is_a_404_naming_both(self) -> None:
        response = call(_gateway(["x"]), "POST", "/v1/chat/completions", chat(model="gpt-4o"))
        assert response.status_code == 404
        error = response.json()["error"]
        assert error["param"] == "model" and error["code"] == "model_not_found"
        assert "'gpt-4o'" in error["message"] and "'scripted'" in error["message"]

    def test_an_unknown_route_and_method_answer_in_openai_shape(self) -> None:
        gateway = _gateway([])
        missing = call(gateway, "GET", "/v1/engines")
        assert missing.status_code == 404 and missing.json()["error"]["code"] == "not_found"
        wrong = call(gateway, "GET", "/v1/chat/completions")
        assert wrong.status_code == 405 and wrong.json()["error"]["code"] == "method_not_allowed"

    def test_a_bug_in_the_gateway_is_a_500_in_openai_shape_naming_the_exception(self) -> None:
        def broken(messages: object, params: object) -> str:
            raise RuntimeError("the backend's own bug")

        gateway = Gateway(config(), upstream=EmbeddedUpstream(ScriptedBackend([broken]), name="scripted"))
        response = call(gateway, "POST", "/v1/chat/completions", chat())
        assert response.status_code == 500
        error = response.json()["error"]
        assert error["type"] == "server_error" and error["code"] == "internal_error"
        assert "RuntimeError: the backend's own bug" in error["message"]

    def test_a_bad_body_is_a_400_naming_the_field(self) -> None:
        response = call(_gateway([]), "POST", "/v1/chat/completions", adaptive(max_samples=0))
        assert response.status_code == 400
        assert response.json()["error"]["param"] == "retryctl.max_samples"


class TestNotAdaptive:
    def test_n_choices_with_usage(self) -> None:
        response = call(_gateway(["one", "two"]), "POST", "/v1/chat/completions", chat(n=2))
        body = response.json()
        assert response.status_code == 200 and body["object"] == "chat.completion"
        assert [c["message"]["content"] for c in body["choices"]] == ["one", "two"]
        assert (
            body["usage"]["total_tokens"]
            == body["usage"]["prompt_tokens"] + body["usage"]["completion_tokens"]
        )
        assert "retryctl" not in body

    def test_a_stream_is_server_sent_events_ending_in_done(self) -> None:
        response = call(_gateway(["hello there"]), "POST", "/v1/chat/completions", chat(stream=True))
        assert response.headers["content-type"].startswith("text/event-stream")
        events = [line.removeprefix("data: ") for line in response.text.split("\n\n") if line]
        assert events[-1] == "[DONE]"
        chunks = [json.loads(e) for e in events[:-1]]
        assert all(c["object"] == "chat.completion.chunk" for c in chunks)
        assert "".join(c["choices"][0]["delta"].get("content", "") for c in chunks) == "hello there"
        assert chunks[-1]["choices"][0]["finish_reason"] == "stop"


class TestAdaptive:
    def test_the_answer_carries_its_confidence_samples_and_verdict(self, tmp_path: Path) -> None:
        with DecisionLog(tmp_path / "d.jsonl") as log:
            gateway = _gateway(["The answer is 42."] * 8, log=log)
            response = call(gateway, "POST", "/v1/chat/completions", adaptive(min_samples=3))
        body = response.json()
        assert response.status_code == 200
        assert body["choices"][0]["message"]["content"] == "The answer is 42."
        block = body["retryctl"]
        assert block["verdict"] == "accept" and block["answer"] == "42"
        assert block["samples_used"] == 3 and block["max_samples"] == 8
        assert block["confidence"] >= 0.8
        assert block["candidates"] == [{"answer": "42", "count": 3, "confidence": 1.0}]
        assert "votes" in block["stopping_reason"]
        assert body["usage"]["completion_tokens"] == 3 * 4  # every sample's tokens, summed
        report = verify_log(tmp_path / "d.jsonl")
        assert report.ok and report.records == 2  # one verdict, one summary
        assert block["run_id"] in (tmp_path / "d.jsonl").read_text()

    def test_a_budget_that_allows_no_sample_is_a_400(self) -> None:
        response = call(_gateway(["x"]), "POST", "/v1/chat/completions", adaptive(budget={"samples": 0}))
        assert response.status_code == 400
        error = response.json()["error"]
        assert error["param"] == "retryctl.budget" and error["code"] == "budget_exhausted"
        assert "samples" in error["message"]


class _Held(ScriptedBackend):
    """A backend whose calls wait until released: requests stay in progress."""

    def __init__(self) -> None:
        super().__init__(["ok"], cycle=True)
        self.release = asyncio.Event()

    async def sample(self, messages, params=None, *, k=1):
        await self.release.wait()
        return await super().sample(messages, params, k=k)


class TestBackpressure:
    def test_past_max_concurrency_the_answer_is_429_with_retry_after(self) -> None:
        async def go() -> tuple[list[int], httpx.Response]:
            backend = _Held()
            gateway = Gateway(config(max_concurrency=2), upstream=EmbeddedUpstream(backend, name="scripted"))
            app = create_app(gateway.config, gateway=gateway)
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://g") as client:
                held = [
                    asyncio.create_task(client.post("/v1/chat/completions", json=chat())) for _ in range(2)
                ]
                while gateway.in_flight < 2:
                    await asyncio.sleep(0.01)
                refused = await client.post("/v1/chat/completions", json=chat())
                backend.release.set()
                done = await asyncio.gather(*held)
                after = await client.post("/v1/chat/completions", json=chat())
            assert gateway.in_flight == 0
            return [r.status_code for r in [*done, after]], refused

        statuses, refused = asyncio.run(go())
        assert statuses == [200, 200, 200]  # the held requests finish, and a later one is served
        assert refused.status_code == 429
        assert refused.headers["retry-after"] == "1"
        assert refused.json()["error"]["code"] == "gateway_busy"


class _Streaming:
    """An upstream whose answer is a stream of chunks; it records when its connection is released."""

    name = "scripted"
    backend = ScriptedBackend(["unused"])

    def __init__(self) -> None:
        self.closed = 0

    async def forward(self, body: object, request: object) -> Forwarded:
        async def chunks() -> AsyncIterator[bytes]:
            yield b"data: one\n\n"
            yield b"data: [DONE]\n\n"

        async def close() -> None:
            self.closed += 1

        return Forwarded(200, "text/event-stream", chunks=chunks(), close=close)

    async def aclose(self) -> None:
        pass


class TestStreamPassthrough:
    def test_a_stream_is_passed_on_and_its_request_and_connection_released(self) -> None:
        upstream = _Streaming()
        gateway = Gateway(config(), upstream=upstream)
        response = call(gateway, "POST", "/v1/chat/completions", chat(stream=True))
        assert response.text == "data: one\n\ndata: [DONE]\n\n"
        assert gateway.in_flight == 0 and upstream.closed == 1

    def test_a_caller_gone_before_the_first_chunk_still_releases_both(self) -> None:
        # The send of the response's start fails (the caller hung up): the generator never starts,
        # so only the response itself can release the request and the upstream connection.
        upstream = _Streaming()
        gateway = Gateway(config(), upstream=upstream)

        async def go() -> None:
            forwarded = await upstream.forward({}, None)
            gateway.in_flight += 1
            response = _Passed(forwarded, gateway._release)

            async def receive() -> dict[str, object]:
                await asyncio.sleep(3600)
                return {"type": "http.disconnect"}

            async def send(message: object) -> None:
                raise OSError("the caller went away")

            with pytest.raises(ClientDisconnect):  # Starlette's name for the failed send
                await response({"type": "http", "asgi": {"spec_version": "2.4"}}, receive, send)

        asyncio.run(go())
        assert gateway.in_flight == 0 and upstream.closed == 1
