"""Reading a chat completion body: every refusal is a 400 naming the field."""

from __future__ import annotations

import json

import pytest

from retryctl.gateway import ApiError
from retryctl.gateway._request import parse_body


def _refusal(body: object) -> ApiError:
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    with pytest.raises(ApiError) as caught:
        parse_body(raw)
    assert caught.value.status == 400
    return caught.value


def _body(**extra: object) -> dict[str, object]:
    return {"model": "m", "messages": [{"role": "user", "content": "hi"}], **extra}


class TestParseBody:
    def test_a_plain_body_is_kept_as_sent(self) -> None:
        sent = _body(temperature=0.3, logit_bias={"1": 2}, user="u1")
        body, chat = parse_body(json.dumps(sent).encode())
        assert body == sent  # fields the gateway does not read are forwarded untouched
        assert chat.temperature == 0.3
        assert not chat.adaptive

    @pytest.mark.parametrize(
        ("body", "param"),
        [
            ({"messages": [{"role": "user", "content": "x"}]}, "model"),
            ({"model": "m"}, "messages"),
            (_body(messages=[]), "messages"),
            (
                _body(messages=[{"role": "user", "content": "a"}, {"role": "bot", "content": "b"}]),
                "messages[1].role",
            ),
            (_body(temperature=3), "temperature"),
            (_body(top_p=0), "top_p"),
            (_body(n=0), "n"),
            (_body(max_tokens=0), "max_tokens"),
            (_body(stream="yes"), "stream"),
            (_body(adaptive=1), "adaptive"),
            (_body(adaptive=True, retryctl={"max_samples": 0}), "retryctl.max_samples"),
            (_body(adaptive=True, retryctl={"min_samples": 4, "max_samples": 2}), "retryctl.max_samples"),
            (_body(adaptive=True, retryctl={"threshold": 1.5}), "retryctl.threshold"),
            (_body(adaptive=True, retryctl={"answer": "vibes"}), "retryctl.answer"),
            (_body(adaptive=True, retryctl={"budget": {"samples": -1}}), "retryctl.budget.samples"),
            (_body(adaptive=True, retryctl={"budget": {"samplez": 1}}), "retryctl.budget.samplez"),
            (_body(adaptive=True, retryctl={"bogus": 1}), "retryctl.bogus"),
            (_body(retryctl={"max_samples": 3}), "retryctl"),
            (_body(adaptive=True, n=3), "n"),
            (_body(adaptive=True, tools=[{"type": "function", "function": {"name": "f"}}]), "tools"),
        ],
    )
    def test_a_bad_field_is_named(self, body: dict[str, object], param: str) -> None:
        error = _refusal(body)
        assert error.param == param
        assert f"'{param}'" in error.message or param in error.message
        assert error.body()["error"]["type"] == "invalid_request_error"

    def test_a_bad_value_is_quoted(self) -> None:
        error = _refusal(_body(temperature=7))
        assert "7" in error.message

    def test_a_body_that_is_not_json_or_not_an_object(self) -> None:
        assert "not valid JSON" in _refusal(b"{nope").message
        assert "JSON object" in _refusal([1, 2]).message

    def test_an_unknown_stopping_rule_is_named_as_policy(self) -> None:
        _, chat = parse_body(json.dumps(_body(adaptive=True, retryctl={"policy": "nope"})).encode())
        with pytest.raises(ApiError) as caught:
            chat.options.controller_policy()
        assert caught.value.param == "retryctl.policy"
        assert "unknown policy 'nope'" in caught.value.message

    def test_options_become_the_controller_policy(self) -> None:
        _, chat = parse_body(
            json.dumps(
                _body(adaptive=True, retryctl={"policy": "sc-5", "max_samples": 5, "threshold": 0.6})
            ).encode()
        )
        policy = chat.options.controller_policy()
        assert (policy.stopping, policy.max_samples, policy.accept_threshold) == ("sc-5", 5, 0.6)
        assert policy.low_confidence == ("stop",)  # one model and nobody to ask: the caller decides
