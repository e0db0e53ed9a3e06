"""The proxy path over real HTTP: the gateway (in this process) in front of the project's fault server
(tests/models/_fault_server.py, a real server on 127.0.0.1) that answers with scripted faults."""

from __future__ import annotations

import gzip
import json
from typing import Any

import httpx
import pytest

from retryctl.gateway import Gateway, GatewayConfig
from tests.gateway._support import adaptive, call, chat
from tests.models._fault_server import FaultServer, Reply, completion, hang, raw, status


def _gateway(server: FaultServer, **kwargs: Any) -> Gateway:
    settings: dict[str, Any] = {"retries": 2, "retry_wait_s": 0.0, **kwargs}
    return Gateway(GatewayConfig(upstream=server.url, upstream_model="fault", model_name="m", **settings))


def _post(gateway: Gateway, body: dict[str, Any]) -> httpx.Response:
    return call(gateway, "POST", "/v1/chat/completions", body)


class TestForwarding:
    def test_the_body_goes_as_sent_with_the_upstream_model_and_without_gateway_fields(
        self, fault_server: FaultServer
    ) -> None:
        body = chat(model="m", temperature=0.2, logit_bias={"5": 1}, user="u-1")
        response = _post(_gateway(fault_server), body)
        assert response.status_code == 200
        assert response.json()["choices"][0]["message"]["content"] == "42-0"  # the upstream's own bytes
        (sent,) = fault_server.requests
        assert sent == {**body, "model": "fault"}

    def test_an_answer_compressed_unasked_reaches_the_caller_decoded(self, fault_server: FaultServer) -> None:
        # The gateway asks for no compression, and passes on no Content-Encoding: what a server
        # compresses anyway must arrive as the JSON it is.
        packed = gzip.compress(completion(1))
        fault_server.script.append(
            Reply(
                "raw", body=packed, headers={"Content-Type": "application/json", "Content-Encoding": "gzip"}
            )
        )
        response = _post(_gateway(fault_server), chat(model="m"))
        assert response.status_code == 200
        assert response.json()["choices"][0]["message"]["content"] == "42-0"

    def test_adaptive_false_is_not_forwarded(self, fault_server: FaultServer) -> None:
        _post(_gateway(fault_server), chat(model="m", adaptive=False))
        assert "adaptive" not in fault_server.requests[0]

    def test_a_refusal_of_the_upstream_is_passed_back_as_it_wrote_it(self, fault_server: FaultServer) -> None:
        refusal = {
            "error": {"message": "context too long", "type": "invalid_request_error", "param": "messages"}
        }
        fault_server.script.append(raw(json.dumps(refusal).encode()))
        fault_server.script[-1].status = 400
        response = _post(_gateway(fault_server), chat(model="m"))
        assert response.status_code == 400
        assert response.json() == refusal
        assert len(fault_server.requests) == 1  # a 400 is not retried


class TestFaults:
    def test_a_transient_fault_is_retried_and_the_caller_sees_the_answer(
        self, fault_server: FaultServer
    ) -> None:
        fault_server.script.extend([status(503), status(502)])
        response = _post(_gateway(fault_server), chat(model="m"))
        assert response.status_code == 200
        assert len(fault_server.requests) == 3

    def test_a_fault_that_outlasts_the_retries_is_a_502_in_openai_shape(
        self, fault_server: FaultServer
    ) -> None:
        # Faults that differ from try to try: the upstream's (a 500 repeated word for word is the
        # request's own: tests/gateway/test_breaker.py).
        fault_server.script.extend([status(503), status(502), status(500)])
        response = _post(_gateway(fault_server), chat(model="m"))
        assert response.status_code == 502
        error = response.json()["error"]
        assert error["type"] == "upstream_error" and error["code"] == "upstream_error"
        assert "HTTP 500" in error["message"] and "upstream m:" in error["message"]
        assert "fault" not in error["message"]  # the upstream's own model name stays in the server log
        assert len(fault_server.requests) == 3  # the first try and two retries

    def test_an_upstream_that_does_not_answer_in_time_is_a_504(self, fault_server: FaultServer) -> None:
        fault_server.script.append(hang())
        response = _post(_gateway(fault_server, retries=0, timeout_s=0.3), chat(model="m"))
        assert response.status_code == 504
        assert response.json()["error"]["code"] == "upstream_timeout"

    def test_a_rate_limit_that_outlasts_the_retries_is_a_429_with_the_upstreams_wait(
        self, fault_server: FaultServer
    ) -> None:
        # Two tries are told to come back at once; the last (the retries are spent) to wait 7 s.
        fault_server.script.extend([status(429, retry_after="0")] * 2 + [status(429, retry_after="7")])
        response = _post(_gateway(fault_server), chat(model="m"))
        assert response.status_code == 429
        assert response.headers["retry-after"] == "7"
        assert response.json()["error"]["code"] == "upstream_rate_limited"

    def test_the_breaker_opens_and_refuses_without_calling_the_upstream(
        self, fault_server: FaultServer
    ) -> None:
        gateway = _gateway(fault_server, retries=0, breaker_failures=2, breaker_cooldown_s=60)
        fault_server.script.extend([status(500)] * 2)
        assert [_post(gateway, chat(model="m")).status_code for _ in range(2)] == [502, 502]
        refused = _post(gateway, chat(model="m"))
        assert refused.status_code == 503
        assert refused.json()["error"]["code"] == "breaker_open"
        assert 55 <= int(refused.headers["retry-after"]) <= 60
        assert len(fault_server.requests) == 2

    def test_an_adaptive_request_retries_then_reports_the_fault(self, fault_server: FaultServer) -> None:
        fault_server.script.extend([status(503)] * 12)
        response = _post(_gateway(fault_server, retries=0), adaptive(model="m"))
        assert response.status_code == 502
        assert "HTTP 503" in response.json()["error"]["message"]
        assert len(fault_server.requests) == 4  # the first attempt and the policy's 3 retries

    def test_an_adaptive_answers_usage_is_what_the_upstream_reported_for_every_call(
        self, fault_server: FaultServer
    ) -> None:
        # The fault server bills 10 prompt tokens a call: more than the ledger's reservation for so
        # short a prompt, which the ledger charges at most. The response says what was really used.
        response = _post(_gateway(fault_server), adaptive(model="m", max_samples=4, answer="text"))
        calls = len(fault_server.requests)
        assert calls >= 2
        usage = response.json()["usage"]
        assert usage["prompt_tokens"] == 10 * calls
        assert usage["completion_tokens"] == 2 * response.json()["retryctl"]["samples_used"]

    @pytest.mark.parametrize("field", ["adaptive", "retryctl"])
    def test_gateway_fields_never_reach_the_upstream_of_an_adaptive_request(
        self, fault_server: FaultServer, field: str
    ) -> None:
        response = _post(_gateway(fault_server), adaptive(model="m", max_samples=1))
        assert response.status_code == 200
        assert all(field not in sent for sent in fault_server.requests)
