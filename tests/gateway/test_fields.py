"""The output fields by OpenAI's rules, the same in every mode: a body the OpenAI API refuses is a 400
naming the field whether the gateway samples itself (a scripted model in place of the embedded one) or
proxies it (the fault server on 127.0.0.1, which must never see it), plain or adaptive."""

from __future__ import annotations

from typing import Any

import pytest

from retryctl.gateway import EmbeddedUpstream, Gateway, GatewayConfig
from retryctl.models import ScriptedBackend
from tests.gateway._support import call, chat, config
from tests.models._fault_server import FaultServer

TOOL = {"type": "function", "function": {"name": "weather", "parameters": {"type": "object"}}}

REFUSED: list[tuple[dict[str, Any], str]] = [
    ({"top_logprobs": 3}, "top_logprobs"),  # without logprobs: true
    ({"logprobs": False, "top_logprobs": 3}, "top_logprobs"),
    ({"logprobs": True, "top_logprobs": 21}, "top_logprobs"),
    ({"response_format": {"type": "yaml"}}, "response_format.type"),
    ({"response_format": {}}, "response_format.type"),
    ({"response_format": {"type": "json_schema"}}, "response_format.json_schema"),
    ({"response_format": {"type": "json_schema", "json_schema": []}}, "response_format.json_schema"),
    (
        {"response_format": {"type": "json_schema", "json_schema": {"schema": {}}}},
        "response_format.json_schema.name",
    ),
    (
        {"response_format": {"type": "json_schema", "json_schema": {"name": "a b", "schema": {}}}},
        "response_format.json_schema.name",
    ),
    (
        {"response_format": {"type": "json_schema", "json_schema": {"name": "a", "schema": "x"}}},
        "response_format.json_schema.schema",
    ),
    ({"tool_choice": "required"}, "tool_choice"),
    ({"tool_choice": {"type": "function", "function": {"name": "weather"}}}, "tool_choice"),
    ({"tool_choice": "sometimes", "tools": [TOOL]}, "tool_choice"),
    ({"tool_choice": {"type": "function"}, "tools": [TOOL]}, "tool_choice.function.name"),
    (
        {"tool_choice": {"type": "function", "function": {"name": "other"}}, "tools": [TOOL]},
        "tool_choice.function.name",
    ),
]

ACCEPTED: list[dict[str, Any]] = [
    {"logprobs": True, "top_logprobs": 2},
    {"response_format": {"type": "text"}},
    {"response_format": {"type": "json_object"}},
    {"tool_choice": "none"},
    {"tool_choice": "auto"},
]


def _embedded() -> Gateway:
    backend = ScriptedBackend(["{}"] * 8, confidence=0.95)
    return Gateway(config(), upstream=EmbeddedUpstream(backend, name="m"))


def _proxying(server: FaultServer) -> Gateway:
    return Gateway(
        GatewayConfig(
            upstream=server.url, upstream_model="fault", model_name="m", retries=0, retry_wait_s=0.0
        )
    )


def _refused(gateway: Gateway, body: dict[str, Any], param: str) -> None:
    response = call(gateway, "POST", "/v1/chat/completions", body)
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["param"] == param and error["code"] == "invalid_value", error
    assert param in error["message"]


class TestRefusedInEveryMode:
    @pytest.mark.parametrize(("extra", "param"), REFUSED)
    @pytest.mark.parametrize("adaptive", [False, True])
    def test_embedded(self, extra: dict[str, Any], param: str, adaptive: bool) -> None:
        if adaptive and "tools" in extra:
            pytest.skip("an adaptive request refuses tools first")
        _refused(_embedded(), chat(model="m", adaptive=adaptive, **extra), param)

    @pytest.mark.parametrize(("extra", "param"), REFUSED)
    @pytest.mark.parametrize("adaptive", [False, True])
    def test_upstream(
        self, fault_server: FaultServer, extra: dict[str, Any], param: str, adaptive: bool
    ) -> None:
        if adaptive and "tools" in extra:
            pytest.skip("an adaptive request refuses tools first")
        _refused(_proxying(fault_server), chat(model="m", adaptive=adaptive, **extra), param)
        assert fault_server.requests == []  # refused at the edge: the upstream never saw it


class TestAccepted:
    @pytest.mark.parametrize("extra", ACCEPTED)
    def test_upstream_gets_it_as_sent(self, fault_server: FaultServer, extra: dict[str, Any]) -> None:
        response = call(_proxying(fault_server), "POST", "/v1/chat/completions", chat(model="m", **extra))
        assert response.status_code == 200, response.text
        (sent,) = fault_server.requests
        assert all(sent[k] == v for k, v in extra.items())

    @pytest.mark.parametrize("extra", ACCEPTED)
    def test_embedded(self, extra: dict[str, Any]) -> None:
        response = call(_embedded(), "POST", "/v1/chat/completions", chat(model="m", **extra))
        assert response.status_code == 200, response.text

    def test_required_and_a_named_function_with_tools(self, fault_server: FaultServer) -> None:
        for choice in ("required", {"type": "function", "function": {"name": "weather"}}):
            body = chat(model="m", tools=[TOOL], tool_choice=choice)
            response = call(_proxying(fault_server), "POST", "/v1/chat/completions", body)
            assert response.status_code == 200, response.text
