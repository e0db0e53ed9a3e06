"""The messages of a request by the OpenAI API's rules: what it refuses is a 400 naming the field, what
it accepts passes, in every mode (through :func:`parse_body`, and through the app around a scripted
text model for the shapes the issue found answered with a 500)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from retryctl.gateway import ApiError, EmbeddedUpstream, Gateway
from retryctl.gateway._request import parse_body
from retryctl.models import ScriptedBackend
from tests.gateway._support import call, config

_CALL = {"id": "call_1", "type": "function", "function": {"name": "add", "arguments": '{"a": 2, "b": 3}'}}

TOOL_CONVERSATION: list[dict[str, Any]] = [
    {"role": "system", "content": "Use the tools."},
    {"role": "user", "content": "2 + 3?", "name": "ana"},
    {"role": "assistant", "content": None, "tool_calls": [_CALL]},
    {"role": "tool", "tool_call_id": "call_1", "content": "5"},
]
"""A valid tool-call conversation: the assistant's call (``content: null``) and the tool's answer."""

CONTENT_PARTS: list[dict[str, Any]] = [
    {"role": "developer", "content": [{"type": "text", "text": "Answer briefly."}]},
    {"role": "user", "content": [{"type": "text", "text": "2 + "}, {"type": "text", "text": "3?"}]},
]

_IMAGE = {"type": "image_url", "image_url": {"url": "http://127.0.0.1/cat.png"}}


def _body(messages: list[Any], **extra: Any) -> bytes:
    return json.dumps({"model": "m", "messages": messages, **extra}).encode()


def _refused(messages: list[Any], *, text_model: bool = False, **extra: Any) -> ApiError:
    with pytest.raises(ApiError) as caught:
        parse_body(_body(messages, **extra), text_model=text_model)
    error = caught.value
    assert error.status == 400 and error.type == "invalid_request_error"
    assert error.param is not None and f"'{error.param}'" in error.message
    return error


def _user(content: Any = "hi") -> dict[str, Any]:
    return {"role": "user", "content": content}


class TestRefused:
    @pytest.mark.parametrize(
        ("messages", "param"),
        [
            ([{"role": "user"}], "messages[0].content"),
            ([_user(None)], "messages[0].content"),
            ([_user(123)], "messages[0].content"),
            ([_user([])], "messages[0].content"),
            ([{"role": "system"}, _user()], "messages[0].content"),
            ([{"role": "system", "content": [_IMAGE]}, _user()], "messages[0].content[0].type"),
            ([_user(), {"role": "assistant"}], "messages[1].content"),
            ([_user(), {"role": "assistant", "content": None}], "messages[1].content"),
            ([_user(), {"role": "assistant", "content": None, "tool_calls": []}], "messages[1].tool_calls"),
            ([*TOOL_CONVERSATION[:3], {"role": "tool", "tool_call_id": "call_1"}], "messages[3].content"),
            ([*TOOL_CONVERSATION[:3], {"role": "tool", "content": "5"}], "messages[3].tool_call_id"),
            (
                [_user(), {"role": "tool", "tool_call_id": "call_1", "content": "5"}],
                "messages[1].tool_call_id",
            ),
            (TOOL_CONVERSATION[:3], "messages[2].tool_calls"),
            ([*TOOL_CONVERSATION[:3], _user()], "messages[2].tool_calls"),
            (
                [_user(), {"role": "assistant", "tool_calls": [{**_CALL, "function": {"name": "add"}}]}],
                "messages[1].tool_calls[0].function.arguments",
            ),
            (
                [_user(), {"role": "assistant", "tool_calls": [{**_CALL, "id": 7}]}],
                "messages[1].tool_calls[0].id",
            ),
            ([_user([{"type": "text", "text": 5}])], "messages[0].content[0].text"),
            ([_user([{"text": "x"}])], "messages[0].content[0].type"),
            ([_user([{"type": "video", "video": "x"}])], "messages[0].content[0].type"),
            ([{**_user(), "name": 3}], "messages[0].name"),
            ([{"content": "x"}], "messages[0].role"),
            ([{"role": "bot", "content": "x"}], "messages[0].role"),
            ([{"role": [], "content": None}], "messages[0].role"),  # found by test_fuzz.py: was a 500
            (["hello"], "messages[0]"),
            ([{"role": "function", "content": "5"}], "messages[0].name"),
        ],
    )
    def test_what_openai_refuses_is_a_400_naming_the_field(self, messages: list[Any], param: str) -> None:
        assert _refused(messages).param == param

    @pytest.mark.parametrize(
        ("extra", "param"),
        [
            ({"temperature": "0.5"}, "temperature"),
            ({"n": True}, "n"),
            ({"n": 1.0}, "n"),
            ({"max_tokens": "16"}, "max_tokens"),
            ({"stop": [1]}, "stop"),
            ({"stream": "true"}, "stream"),
            ({"seed": 1.5}, "seed"),
            ({"logprobs": 1}, "logprobs"),
            ({"top_logprobs": "3"}, "top_logprobs"),
            ({"tools": {"type": "function"}}, "tools"),
            ({"tool_choice": 3}, "tool_choice"),
            ({"response_format": "json_object"}, "response_format"),
            ({"logit_bias": {"50256": "x"}}, "logit_bias.50256"),
            ({"logit_bias": {"str": "x"}}, "logit_bias.str"),  # a key, not a union member's name
            ({"user": 7}, "user"),
            ({"model": 7}, "model"),
            ({"adaptive": True, "retryctl": {"max_samples": "4"}}, "retryctl.max_samples"),
        ],
    )
    def test_a_top_level_field_of_the_wrong_type_is_named(self, extra: dict[str, Any], param: str) -> None:
        error = _refused([_user()], **extra)
        assert error.param == param
        assert "(got " in error.message  # the value given is quoted

    def test_a_union_field_says_the_types_it_takes(self) -> None:
        assert "must be str or list[str]" in _refused([_user()], stop=3).message

    def test_an_unknown_role_lists_the_known_ones(self) -> None:
        message = _refused([{"role": "bot", "content": "x"}]).message
        assert "'tool'" in message and "(got 'bot')" in message


class TestAccepted:
    @pytest.mark.parametrize(
        "messages",
        [
            TOOL_CONVERSATION,
            [*TOOL_CONVERSATION, {"role": "assistant", "content": "5."}, _user("thanks")],
            CONTENT_PARTS,
            [_user([{"type": "text", "text": "what is this?"}, _IMAGE])],
            [{"role": "assistant", "content": "", "refusal": None}, _user("")],
            [{**_user(), "cache_hint": {"any": "extension"}}],  # an upstream's own field passes
            [_user(), {"role": "function", "name": "f", "content": None}],
            [_user(), {"role": "assistant", "content": None, "audio": {"id": "audio_1"}}, _user("again")],
        ],
    )
    def test_what_openai_accepts_passes_as_sent(self, messages: list[Any]) -> None:
        body, chat = parse_body(_body(messages))
        assert chat.messages == messages and body["messages"] == messages

    def test_an_int_is_a_number(self) -> None:
        _, chat = parse_body(_body([_user()], temperature=1, top_p=1))
        assert chat.temperature == 1


class TestTextModel:
    """What the gateway samples itself (embedded, adaptive) reads text: other parts are named."""

    def test_an_image_part_is_refused_naming_it(self) -> None:
        messages = [_user([{"type": "text", "text": "what is this?"}, _IMAGE])]
        error = _refused(messages, text_model=True)
        assert error.param == "messages[0].content[1]" and error.code == "unsupported_content"
        assert _refused(messages, adaptive=True).param == "messages[0].content[1]"

    def test_an_assistant_refusal_part_is_refused_naming_it(self) -> None:
        refusal = {"role": "assistant", "content": [{"type": "refusal", "refusal": "no"}]}
        messages = [_user(), refusal, _user("please")]
        assert parse_body(_body(messages))[1].messages == messages  # proxied: OpenAI takes it
        assert _refused(messages, text_model=True).param == "messages[1].content[0]"

    def test_a_function_message_is_refused_naming_its_role(self) -> None:
        messages = [_user(), {"role": "function", "name": "f", "content": "5"}]
        assert _refused(messages, text_model=True).param == "messages[1].role"


def _scripted() -> Gateway:
    backend = ScriptedBackend(["The answer is 5."], cycle=True, confidence=0.95)
    return Gateway(config(), upstream=EmbeddedUpstream(backend, name="scripted"))


class TestThroughTheApp:
    """The shapes the issue found answered with a 500 (or a 200 for ``content: null``), in plain and
    adaptive requests to a text model answered in process."""

    @pytest.mark.parametrize("adaptive", [False, True])
    @pytest.mark.parametrize(
        ("messages", "param"),
        [
            ([{"role": "user"}], "messages[0].content"),
            ([{"role": "system"}, _user()], "messages[0].content"),
            ([_user(), {"role": "assistant"}], "messages[1].content"),
            ([*TOOL_CONVERSATION[:3], {"role": "tool", "tool_call_id": "call_1"}], "messages[3].content"),
            ([_user(123)], "messages[0].content"),
            ([_user(None)], "messages[0].content"),
        ],
    )
    def test_a_refused_message_is_a_400(self, messages: list[Any], param: str, adaptive: bool) -> None:
        body: dict[str, Any] = {"model": "scripted", "messages": messages}
        if adaptive:
            body |= {"adaptive": True, "retryctl": {"max_samples": 2}}
        response = call(_scripted(), "POST", "/v1/chat/completions", body)
        assert response.status_code == 400
        error = response.json()["error"]
        assert set(error) == {"message", "type", "param", "code"} and error["param"] == param

    @pytest.mark.parametrize("adaptive", [False, True])
    @pytest.mark.parametrize("messages", [TOOL_CONVERSATION, CONTENT_PARTS])
    def test_a_valid_shape_is_answered(self, messages: list[Any], adaptive: bool) -> None:
        body: dict[str, Any] = {"model": "scripted", "messages": messages}
        if adaptive:
            body |= {"adaptive": True, "retryctl": {"max_samples": 2}}
        response = call(_scripted(), "POST", "/v1/chat/completions", body)
        assert response.status_code == 200, response.text
        assert response.json()["choices"][0]["message"]["content"] == "The answer is 5."
