"""Capability errors told from faults by their body, and what each server refused, remembered."""

from __future__ import annotations

import json
import threading

import pytest

from retryctl.models import CapabilityRegistry, ServerCapabilities
from retryctl.models._openai_caps import unsupported_parameter
from tests.models._picky_server import LLAMA_CPP_JSON_SCHEMA_500, OPENAI_JSON_OBJECT_400, OPENAI_LOGPROBS_400

SENT = {"model", "messages", "temperature", "max_tokens", "seed", "logprobs", "top_logprobs", "n", "stop"}
WITH_SCHEMA = SENT | {"response_format", "json_schema"}
WITH_OBJECT = SENT | {"response_format", "json_object"}


def _error(message: str, **fields: object) -> str:
    return json.dumps({"error": {"message": message, "type": "invalid_request_error", **fields}})


def _llama(message: str) -> str:
    # llama.cpp's server wraps whatever its handler raised (here pydantic's error) in a 500.
    return json.dumps({"error": {"message": message, "type": "internal_server_error", "param": None}})


CAPABILITY = [
    ("llama.cpp json_schema", 500, LLAMA_CPP_JSON_SCHEMA_500, WITH_SCHEMA, "response_format"),
    (
        "llama.cpp bad seed",
        500,
        _llama(
            "1 validation error:\n  {'type': 'int_parsing', 'loc': ('body', 'seed'), 'msg': 'Input should "
            "be a valid integer, unable to parse string as an integer', 'input': 'x'}"
        ),
        SENT,
        "seed",
    ),
    (
        "llama.cpp tools",
        500,
        _llama(
            "2 validation errors:\n  {'type': 'literal_error', 'loc': ('body', 'tools', 0, 'type'), 'msg': "
            "\"Input should be 'function'\", 'input': 'nope', 'ctx': {'expected': \"'function'\"}}\n  "
            "{'type': 'missing', 'loc': ('body', 'tools', 0, 'function'), 'msg': 'Field required', "
            "'input': {'type': 'nope'}}"
        ),
        SENT | {"tools"},
        "tools",
    ),
    (
        "llama.cpp developer role",
        500,
        _llama(
            "7 validation errors:\n  {'type': 'literal_error', 'loc': ('body', 'messages', 0, "
            "'ChatCompletionRequestSystemMessage', 'role'), 'msg': \"Input should be 'system'\", "
            "'input': 'developer', 'ctx': {'expected': \"'system'\"}}"
        ),
        SENT,
        "messages",
    ),
    (
        "FastAPI 422, pydantic 2",
        422,
        json.dumps(
            {
                "detail": [
                    {
                        "type": "extra_forbidden",
                        "loc": ["body", "top_k"],
                        "msg": "Extra inputs are not permitted",
                        "input": 20,
                    }
                ]
            }
        ),
        SENT | {"top_k"},
        "top_k",
    ),
    (
        "FastAPI 422, pydantic 1",
        422,
        json.dumps(
            {
                "detail": [
                    {"loc": ["body", "min_p"], "msg": "extra fields not permitted", "type": "value_error"}
                ]
            }
        ),
        SENT | {"min_p"},
        "min_p",
    ),
    ("OpenAI response format", 400, OPENAI_JSON_OBJECT_400, WITH_OBJECT, "response_format"),
    ("OpenAI unsupported_parameter", 400, OPENAI_LOGPROBS_400, SENT, "logprobs"),
    (
        "OpenAI unknown argument",
        400,
        _error("Unrecognized request argument supplied: top_k", param=None),
        SENT | {"top_k"},
        "top_k",
    ),
    (
        "vLLM schema features",
        400,
        json.dumps(
            {
                "object": "error",
                "message": "The provided JSON schema contains features not supported by xgrammar.",
                "type": "BadRequestError",
                "param": None,
                "code": 400,
            }
        ),
        WITH_SCHEMA,
        "json_schema",
    ),
    (
        "a nested param field",
        400,
        _error("Invalid value for 'response_format.type'.", param="response_format.type"),
        WITH_OBJECT,
        "response_format",
    ),
    (
        "a format refused in words",
        400,
        json.dumps({"error": "'response_format.type' must be 'json_schema' or 'text'"}),
        WITH_OBJECT,
        "response_format",
    ),
    ("a quoted short name", 400, _error("'n' is not supported; only one choice is returned"), SENT, "n"),
    ("plain text, not JSON", 501, "logprobs not implemented", SENT, "logprobs"),
]

NOT_CAPABILITY = [
    (
        "llama.cpp decode failure",
        500,
        _llama("llama_decode returned -1"),
        WITH_SCHEMA,
    ),
    (
        "a 500 that echoes the request",
        500,
        _llama("invalid sampler state for request {'logprobs': True, 'seed': 7, \"n\": 2}"),
        SENT,
    ),
    ("an unknown error in prose", 500, _llama("Unknown error in the model runner"), SENT),
    (
        "llama.cpp context length",
        400,
        json.dumps(
            {
                "error": {
                    "message": "This model's maximum context length is 1024 tokens. However, you requested "
                    "1100 tokens (1000 in the messages, 100 in the completion). Please reduce the length "
                    "of the messages or completion.",
                    "type": "invalid_request_error",
                    "param": "messages",
                    "code": "context_length_exceeded",
                }
            }
        ),
        SENT,
    ),
    ("a rate limit that says unsupported", 429, _error("'logprobs' unsupported at this tier"), SENT),
    ("a gateway", 503, "Service Unavailable", SENT),
    (
        "a refusal of what was not sent",
        400,
        _error("Unsupported parameter: 'reasoning_effort' is not supported with this model."),
        SENT,
    ),
    (
        "a missing field whose echo holds sent names",
        500,
        _llama(
            "1 validation error:\n  {'type': 'missing', 'loc': ('body', 'messages'), 'msg': 'Field "
            "required', 'input': {'logprobs': True, 'seed': 1}}"
        ),
        SENT,
    ),
    ("no error body at all", 500, "", SENT),
]


class TestUnsupportedParameter:
    @pytest.mark.parametrize(
        ("status", "body", "sent", "expected"),
        [c[1:] for c in CAPABILITY],
        ids=[c[0] for c in CAPABILITY],
    )
    def test_a_refused_parameter_is_named(self, status, body, sent, expected):
        assert unsupported_parameter(status, body, sent) == expected

    @pytest.mark.parametrize(
        ("status", "body", "sent"),
        [c[1:] for c in NOT_CAPABILITY],
        ids=[c[0] for c in NOT_CAPABILITY],
    )
    def test_faults_and_other_errors_are_not_capability_errors(self, status, body, sent):
        assert unsupported_parameter(status, body, sent) is None

    def test_the_parameter_must_have_been_sent(self):
        assert unsupported_parameter(500, LLAMA_CPP_JSON_SCHEMA_500, SENT) is None
        assert unsupported_parameter(400, OPENAI_LOGPROBS_400, SENT - {"logprobs"}) is None


class TestServerCapabilities:
    def test_refuse_is_remembered_and_reports_what_is_new(self):
        caps = ServerCapabilities("http://h/v1", "m")
        assert caps.refused == frozenset()
        assert caps.refuse("json_schema") is True
        assert caps.refuse("json_schema") is False
        assert caps.refused == {"json_schema"}
        caps.forget()
        assert caps.refused == frozenset()

    def test_concurrent_refusals_are_all_kept(self):
        caps = ServerCapabilities("http://h/v1", "m")
        threads = [threading.Thread(target=caps.refuse, args=(f"f{i}",)) for i in range(32)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert len(caps.refused) == 32


class TestCapabilityRegistry:
    def test_one_record_per_server_and_model(self):
        registry = CapabilityRegistry()
        a = registry.server("http://Host:8000/v1/", "m")
        assert registry.server("http://host:8000/v1", "m") is a
        assert registry.server("http://host:8000/v1", "other") is not a
        assert registry.server("http://host:9000/v1", "m") is not a

    def test_shared_is_one_instance(self):
        assert CapabilityRegistry.shared() is CapabilityRegistry.shared()
        assert CapabilityRegistry() is not CapabilityRegistry.shared()
