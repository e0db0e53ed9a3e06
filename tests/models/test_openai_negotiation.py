"""OpenAIBackend against real picky HTTP servers on 127.0.0.1: what a server refuses is stepped around at
once (never retried), remembered per server, and noted on the candidates it serves."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from retryctl.controller import classify
from retryctl.controller._errors import ErrorClass
from retryctl.models import (
    CapabilityRegistry,
    MalformedResponse,
    OpenAIBackend,
    RetrySettings,
    SamplingParams,
    ToolSpec,
    TransientBackendError,
    UnsupportedParameter,
)
from tests.models._picky_server import (
    LLAMA_CPP_JSON_SCHEMA_500,
    OPENAI_JSON_OBJECT_400,
    OPENAI_LOGPROBS_400,
    PickyServer,
    Refusal,
    mode_of,
)

Q = [{"role": "user", "content": "Mia has 7 boxes of 8 crayons. She loses 5. How many are left?"}]
SCHEMA = {
    "type": "object",
    "properties": {"expression": {"type": "string"}},
    "required": ["expression"],
}
STRUCTURED = SamplingParams(
    temperature=0.2,
    seed=3,
    max_tokens=40,
    response_format={"type": "json_schema", "json_schema": {"name": "expression", "schema": SCHEMA}},
)
EXPRESSION = json.dumps({"expression": "7 * 8 - 5"})


def refuse_modes(refusals: dict[str, Refusal]) -> Callable[[dict[str, Any]], Refusal | None]:
    return lambda request: refusals.get(mode_of(request))


LLAMA_LIKE = {"json_schema": Refusal(500, LLAMA_CPP_JSON_SCHEMA_500)}
NO_JSON_MODES = {
    "json_schema": Refusal(500, LLAMA_CPP_JSON_SCHEMA_500),
    "json_object+schema": Refusal(400, OPENAI_JSON_OBJECT_400),
    "json_object": Refusal(400, OPENAI_JSON_OBJECT_400),
}


@pytest.fixture
def picky() -> Iterator[Callable[..., PickyServer]]:
    started: list[PickyServer] = []

    def start(refuse: Callable[[dict[str, Any]], Refusal | None], reply: Callable[[dict[str, Any]], str]):
        server = PickyServer(refuse, reply).start()
        started.append(server)
        return server

    yield start
    for server in started:
        server.stop()


def make(
    server: PickyServer, waits: list[float], registry: CapabilityRegistry, **kwargs: Any
) -> OpenAIBackend:
    async def record(seconds: float) -> None:
        waits.append(seconds)

    kwargs.setdefault("model", "picky-model")
    return OpenAIBackend(
        base_url=server.url,
        retry=RetrySettings(attempts=4, initial_wait_s=0.01, jitter=False),
        timeout_s=5.0,
        sleep=record,
        capabilities=registry,
        **kwargs,
    )


def system_text(request: dict[str, Any]) -> str:
    first = request["messages"][0]
    return str(first["content"]) if first["role"] == "system" else ""


class TestStructuredOutputLadder:
    def test_json_schema_refused_with_a_500_goes_to_json_object_with_the_schema_at_once(self, picky):
        server = picky(refuse_modes(LLAMA_LIKE), lambda r: EXPRESSION)
        waits: list[float] = []
        backend = make(server, waits, CapabilityRegistry())
        [cand] = asyncio.run(backend.sample(Q, STRUCTURED))
        assert server.modes() == ["json_schema", "json_object+schema"]
        assert waits == []  # a capability error is not retried
        assert server.requests[1]["response_format"] == {"type": "json_object", "schema": SCHEMA}
        assert "matching this JSON schema" in system_text(server.requests[1])
        assert json.loads(cand.text) == {"expression": "7 * 8 - 5"}
        assert cand.constraint == "strict"
        assert any("json_object with the schema" in n for n in cand.notes)
        assert backend.capabilities.refused == {"json_schema"}

    def test_a_server_refusing_json_object_too_is_asked_in_the_prompt_and_its_json_parsed(self, picky):
        prose = f"Sure! Here is the expression:\n```json\n{EXPRESSION}\n```\nIt gives 51."
        server = picky(refuse_modes(NO_JSON_MODES), lambda r: prose)
        waits: list[float] = []
        [cand] = asyncio.run(make(server, waits, CapabilityRegistry()).sample(Q, STRUCTURED))
        assert server.modes() == ["json_schema", "json_object+schema", "json_object", "prompt"]
        assert waits == []
        last = server.requests[-1]
        assert "response_format" not in last
        assert "matching this JSON schema" in system_text(last)
        assert cand.text == EXPRESSION
        assert cand.constraint == "none"
        assert any("plain prompt, JSON parsed from the text" in n for n in cand.notes)

    def test_the_mode_learnt_is_remembered_for_every_backend_of_that_server(self, picky):
        server = picky(refuse_modes(NO_JSON_MODES), lambda r: EXPRESSION)
        registry = CapabilityRegistry()
        asyncio.run(make(server, [], registry).sample(Q, STRUCTURED))
        assert len(server.requests) == 4
        server.requests.clear()
        second = make(server, [], registry)
        cands = asyncio.run(second.sample(Q, STRUCTURED, k=2))
        assert server.modes() == ["prompt", "prompt"]  # n=2 answered with one choice, then one more
        assert all(c.text == EXPRESSION for c in cands)
        # Another model on the same server is a different capability record.
        server.requests.clear()
        asyncio.run(make(server, [], registry, model="other").sample(Q, STRUCTURED))
        assert server.modes()[0] == "json_schema"

    def test_backends_share_the_process_registry_by_default(self, picky):
        server = picky(lambda r: None, lambda r: EXPRESSION)
        a = OpenAIBackend(model="m", base_url=server.url)
        b = OpenAIBackend(model="m", base_url=server.url + "/")
        assert a.capabilities is b.capabilities
        assert a.capabilities is CapabilityRegistry.shared().server(server.url, "m")

    def test_parallel_requests_of_one_call_step_down_together(self, picky):
        server = picky(refuse_modes(LLAMA_LIKE), lambda r: EXPRESSION)
        cands = asyncio.run(make(server, [], CapabilityRegistry()).sample(Q, STRUCTURED, k=3))
        assert server.modes() == ["json_schema"] + ["json_object+schema"] * 3
        assert server.requests[1]["n"] == 3 and all("n" not in r for r in server.requests[2:])
        assert len(cands) == 3 and all(c.constraint == "strict" for c in cands)


class TestUnusableStructuredReplies:
    def test_no_reply_with_json_is_a_malformed_response_the_controller_refines(self, picky):
        server = picky(refuse_modes(NO_JSON_MODES), lambda r: "I think it is 51.")
        backend = make(server, [], CapabilityRegistry())
        with pytest.raises(MalformedResponse) as info:
            asyncio.run(backend.sample(Q, STRUCTURED, k=2))
        assert "none of the 2 replies held the requested JSON" in str(info.value)
        assert info.value.body == "I think it is 51."
        assert classify(info.value).error_class is ErrorClass.VALIDATION

    def test_a_reply_missing_a_required_field_is_kept_with_a_note_when_another_is_usable(self, picky):
        wrong = json.dumps({"answer": 51})
        replies = iter([EXPRESSION, wrong])
        server = picky(lambda r: None, lambda r: next(replies))
        backend = make(server, [], CapabilityRegistry(), n_mode="parallel")
        for mode in ("json_schema", "json_object+schema", "json_object"):
            backend.capabilities.refuse(mode)
        by_text = {c.text: c for c in asyncio.run(backend.sample(Q, STRUCTURED, k=2))}
        assert set(by_text) == {EXPRESSION, wrong} and server.modes() == ["prompt", "prompt"]
        assert any(
            "no usable JSON in the reply: missing required ['expression']" in n for n in by_text[wrong].notes
        )
        assert not any("no usable JSON" in n for n in by_text[EXPRESSION].notes)


class TestOtherRefusedParameters:
    def test_refused_logprobs_are_dropped_and_the_candidate_says_so(self, picky):
        server = picky(
            lambda r: Refusal(400, OPENAI_LOGPROBS_400) if "logprobs" in r else None, lambda r: "51"
        )
        waits: list[float] = []
        [cand] = asyncio.run(make(server, waits, CapabilityRegistry()).sample(Q, SamplingParams(seed=1)))
        assert len(server.requests) == 2 and waits == []
        assert "logprobs" not in server.requests[1] and "top_logprobs" not in server.requests[1]
        assert cand.text == "51" and cand.logprobs is None
        assert "sent without logprobs (the server refused them)" in cand.notes

    def test_refused_tools_are_offered_in_the_prompt_and_the_call_read_from_the_text(self, picky):
        refusal = Refusal(400, json.dumps({"error": {"message": "tools are not supported by this server"}}))
        server = picky(
            lambda r: refusal if "tools" in r else None,
            lambda r: 'Calling: {"name": "calc", "arguments": {"expression": "6*7"}}',
        )
        params = SamplingParams(tools=(ToolSpec(name="calc", description="Evaluates arithmetic."),))
        [cand] = asyncio.run(make(server, [], CapabilityRegistry()).sample(Q, params))
        assert "tools" not in server.requests[1]
        assert '"name": <tool name>' in system_text(server.requests[1])
        assert [c.name for c in cand.tool_calls] == ["calc"]
        assert cand.tool_calls[0].arguments() == {"expression": "6*7"}
        assert cand.finish_reason == "tool_calls"
        assert any("tool calls: plain prompt" in n for n in cand.notes)

    def test_a_refused_parameter_with_no_fallback_ends_at_once_as_terminal(self, picky):
        body = json.dumps(
            {
                "error": {
                    "message": "Unsupported parameter: 'temperature' is not supported with this model.",
                    "param": "temperature",
                    "code": "unsupported_parameter",
                }
            }
        )
        server = picky(lambda r: Refusal(400, body), lambda r: "51")
        waits: list[float] = []
        with pytest.raises(UnsupportedParameter) as info:
            asyncio.run(make(server, waits, CapabilityRegistry()).sample(Q))
        assert info.value.parameter == "temperature" and info.value.attempts == 1
        assert len(server.requests) == 1 and waits == []
        assert classify(info.value).error_class is ErrorClass.TERMINAL

    def test_a_genuine_500_stays_transient_and_is_retried(self, picky):
        # Each try's 500 says something else: a 500 repeated word for word ends the retries at the
        # second (tests/models/test_openai_faults.py::TestRepeated500), and is no capability error either.
        tries = iter(range(100))

        def refuse(request: dict[str, Any]) -> Refusal:
            message = f"llama_decode returned -1 (slot {next(tries)})"
            return Refusal(500, json.dumps({"error": {"message": message, "type": "internal_server_error"}}))

        server = picky(refuse, lambda r: "51")
        waits: list[float] = []
        backend = make(server, waits, CapabilityRegistry())
        with pytest.raises(TransientBackendError) as info:
            asyncio.run(backend.sample(Q, STRUCTURED))
        assert info.value.attempts == 4 and len(waits) == 3
        assert server.modes() == ["json_schema"] * 4
        assert backend.capabilities.refused == frozenset()
