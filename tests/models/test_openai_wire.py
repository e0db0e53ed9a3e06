from __future__ import annotations

import email.utils
import json

import httpx2
import openai
import pytest

from retryctl.models import (
    BackendTimeout,
    MalformedResponse,
    ServerFault,
    TerminalBackendError,
    TransientBackendError,
    UnsupportedParameter,
    Usage,
)
from retryctl.models._openai_wire import (
    parse_completion,
    parse_retry_after,
    split_usage,
    translate_error,
)
from tests.models._picky_server import LLAMA_CPP_JSON_SCHEMA_500

REQ = httpx2.Request("POST", "http://127.0.0.1/v1/chat/completions")


def status_error(code: int, headers: dict[str, str] | None = None) -> openai.APIStatusError:
    response = httpx2.Response(code, headers=headers or {}, request=REQ, json={"error": "x"})
    cls = {429: openai.RateLimitError, 400: openai.BadRequestError}.get(code, openai.APIStatusError)
    if code >= 500:
        cls = openai.InternalServerError
    return cls("boom", response=response, body=None)


class TestParseRetryAfter:
    def test_seconds_ms_and_dates(self):
        assert parse_retry_after({"Retry-After": "2.5"}) == 2.5
        assert parse_retry_after({"retry-after-ms": "1500"}) == 1.5
        date = email.utils.formatdate(1000.0 + 42, usegmt=True)
        assert parse_retry_after({"retry-after": date}, now=1000.0) == 42.0
        assert parse_retry_after({"retry-after": "soon"}) is None
        assert parse_retry_after({}) is None


class TestTranslateError:
    def test_status_codes(self):
        err = translate_error(status_error(429, {"retry-after": "3"}), backend="b")
        assert type(err) is TransientBackendError and err.retry_after_s == 3.0
        assert err.status_code == 429
        assert type(translate_error(status_error(503), backend="b")) is TransientBackendError
        bad = translate_error(status_error(400), backend="b")
        assert type(bad) is TerminalBackendError and bad.status_code == 400

    def test_a_capability_error_is_told_from_a_fault_by_its_body_and_what_was_sent(self):
        body = json.loads(LLAMA_CPP_JSON_SCHEMA_500)
        response = httpx2.Response(500, request=REQ, json=body)
        exc = openai.InternalServerError(body["error"]["message"], response=response, body=body)
        refused = translate_error(exc, backend="b", sent={"model", "messages", "response_format"})
        assert type(refused) is UnsupportedParameter and refused.parameter == "response_format"
        assert refused.status_code == 500 and not refused.retryable
        assert "\n" not in str(refused)  # the multi-line pydantic report is one line
        fault = translate_error(exc, backend="b")  # nothing said sent: a fault, its whole message kept
        assert type(fault) is ServerFault and fault.retryable
        assert fault.detail == " ".join(body["error"]["message"].split())

    def test_transport_errors(self):
        assert isinstance(translate_error(openai.APITimeoutError(REQ), backend="b"), BackendTimeout)
        conn = translate_error(openai.APIConnectionError(request=REQ), backend="b")
        assert type(conn) is TransientBackendError


class TestSplitUsage:
    def test_parts_add_up_and_input_goes_to_the_first(self):
        parts = split_usage(Usage(10, 7), [1, 2, 4])
        assert [p.input_tokens for p in parts] == [10, 0, 0]
        assert sum(p.output_tokens for p in parts) == 7
        assert [p.output_tokens for p in parts] == [1, 2, 4]
        assert split_usage(Usage(5, 5), []) == []


class TestParseCompletion:
    def body(self, **choice: object) -> str:
        base = {"index": 0, "message": {"content": "hi"}, "finish_reason": "stop"}
        return json.dumps({"choices": [base | choice], "usage": {"prompt_tokens": 3, "completion_tokens": 1}})

    def test_reads_text_logprobs_and_tool_calls(self):
        body = self.body(
            message={
                "content": None,
                "tool_calls": [{"id": "c", "function": {"name": "f", "arguments": {"a": 1}}}],
            },
            logprobs={"content": [{"token": "hi", "logprob": -0.3, "top_logprobs": []}]},
        )
        [cand] = parse_completion(body, backend="b", model="m", latency_ms=5.0, seed=1)
        assert cand.text == "" and cand.token_logprobs == (-0.3,)
        assert cand.tool_calls[0].arguments() == {"a": 1}
        assert cand.usage == Usage(3, 1) and cand.seed == 1 and cand.latency_ms == 5.0

    def test_choices_are_ordered_by_index(self):
        body = json.dumps(
            {
                "choices": [
                    {"index": 1, "message": {"content": "b"}},
                    {"index": 0, "message": {"content": "a"}},
                ]
            }
        )
        assert [c.text for c in parse_completion(body, backend="b", model="m", latency_ms=0, seed=None)] == [
            "a",
            "b",
        ]

    def test_lone_surrogate_escapes_become_replacement_characters(self):
        # "\ud800" alone is no character; a pair is one. The text must stay writable as UTF-8.
        body = self.body(
            message={
                "content": "a\\ud800b \\ud83d\\ude00",
                "tool_calls": [{"function": {"name": "f\\udc00"}}],
            }
        )
        [cand] = parse_completion(body.replace("\\\\", "\\"), backend="b", model="m", latency_ms=0, seed=None)
        assert cand.text == "a\ufffdb \U0001f600"
        assert cand.tool_calls[0].name == "f\ufffd"
        cand.text.encode()

    @pytest.mark.parametrize("body", ["", "null", '{"choices": null}', '{"choices": [{"message": 3}]}'])
    def test_unusable_bodies_are_malformed(self, body):
        with pytest.raises(MalformedResponse):
            parse_completion(body, backend="b", model="m", latency_ms=0, seed=None)
