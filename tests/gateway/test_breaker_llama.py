"""One client's tool-call conversations do not take a real upstream from the others: ``retryctl serve``
as a process in front of ``python -m llama_cpp.server`` serving the embedded GGUF on 127.0.0.1 (the
``llama_server`` fixture of tests/models/conftest.py), driven by the ``openai`` SDK. llama.cpp's server
answers a valid tool-call conversation (assistant ``content: null`` with ``tool_calls``, then a ``tool``
message) with a 500 listing its own validation errors."""

from __future__ import annotations

import openai
import pytest
from openai.types.chat import ChatCompletionMessageParam

from tests.gateway._support import serving
from tests.models.conftest import gguf_path, llama_server, needs_llama  # noqa: F401

pytestmark = needs_llama


def _tool_conversation(result: int) -> list[ChatCompletionMessageParam]:
    call = {"id": "call_1", "type": "function", "function": {"name": "add", "arguments": '{"a": 2, "b": 3}'}}
    return [
        {"role": "user", "content": "What is 2 + 3?"},
        {"role": "assistant", "content": None, "tool_calls": [call]},  # type: ignore[list-item]
        {"role": "tool", "tool_call_id": "call_1", "content": str(result)},
    ]


def test_tool_call_conversations_of_one_client_leave_the_upstream_to_another(
    request: pytest.FixtureRequest,
) -> None:
    upstream = str(request.getfixturevalue("llama_server"))
    # More conversations than --breaker-failures: before, the third opened the breaker for everyone.
    args = ("--upstream", upstream, "--upstream-model", "smollm2", "--breaker-failures", "2")
    with serving(*args) as (url, _):
        client = openai.OpenAI(base_url=url, api_key="unused", max_retries=0, timeout=120)
        for result in range(6):
            with pytest.raises(openai.APIStatusError) as info:
                client.chat.completions.create(
                    model="smollm2", messages=_tool_conversation(result), max_tokens=4
                )
            assert info.value.status_code == 502
            body = info.value.body
            assert isinstance(body, dict) and body["code"] == "upstream_refused_request"
            assert "validation error" in body["message"]  # llama.cpp's own words
        done = client.chat.completions.create(
            model="smollm2", messages=[{"role": "user", "content": "Say hi."}], max_tokens=4
        )
        assert done.choices[0].message.content


def test_adaptive_tool_call_conversations_leave_the_upstream_to_another(
    request: pytest.FixtureRequest,
) -> None:
    upstream = str(request.getfixturevalue("llama_server"))
    args = ("--upstream", upstream, "--upstream-model", "smollm2", "--breaker-failures", "2")
    adaptive = {"adaptive": True, "retryctl": {"max_samples": 2, "answer": "text"}}
    with serving(*args) as (url, _):
        client = openai.OpenAI(base_url=url, api_key="unused", max_retries=0, timeout=120)
        for result in range(4):
            with pytest.raises(openai.APIStatusError) as info:
                client.chat.completions.create(
                    model="smollm2", messages=_tool_conversation(result), max_tokens=4, extra_body=adaptive
                )
            assert info.value.status_code == 502
            body = info.value.body
            assert isinstance(body, dict) and body["code"] == "upstream_refused_request"
            assert "validation error" in body["message"]  # llama.cpp's own words
        done = client.chat.completions.create(
            model="smollm2",
            messages=[{"role": "user", "content": "Say hi."}],
            max_tokens=4,
            extra_body=adaptive,
        )
        assert done.choices[0].message.content is not None
