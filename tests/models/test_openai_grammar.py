"""OpenAIBackend decoding under ``SamplingParams.grammar``: a real ``python -m llama_cpp.server`` honours
a GBNF grammar on every sample; real test servers on 127.0.0.1 record what each dialect sends, refuse
the grammar field (dropped, remembered, noted) or ignore it (caught by the regex check)."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from dataclasses import replace
from typing import Any

import pytest

from retryctl.exceptions import ConfigError
from retryctl.models import CapabilityRegistry, Grammar, OpenAIBackend, SamplingParams
from retryctl.models._openai_grammar import GRAMMAR_FIELDS, grammar_plan
from tests.models._picky_server import LLAMA_CPP_JSON_SCHEMA_500, PickyServer, Refusal, mode_of
from tests.models.conftest import needs_llama

Q = [{"role": "user", "content": "Is the sky blue? Answer yes or no."}]
YES_NO = Grammar(name="yes-no", gbnf='root ::= "yes" | "no"', description="yes or no")
SUM = Grammar(name="sum", regex=r"\d{1,2} [+*-] \d{1,2}")
SCHEMA = {"type": "object", "properties": {"answer": {"type": "string"}}, "required": ["answer"]}
ANSWER = Grammar(name="answer obj", json_schema=SCHEMA)
NOT_HONOURED = "grammar 'yes-no' not honoured by the server: checked after decoding"
# What a FastAPI server with ``extra="forbid"`` answers to a field it does not know.
GRAMMAR_400 = json.dumps(
    {
        "detail": [
            {
                "type": "extra_forbidden",
                "loc": ["body", "grammar"],
                "msg": "Extra inputs are not permitted",
                "input": 'root ::= "yes" | "no"',
            }
        ]
    }
)


def params(grammar: Grammar | None, **kwargs: Any) -> SamplingParams:
    base: dict[str, Any] = {"temperature": 1.0, "max_tokens": 8, "seed": 5, "logprobs": False}
    return SamplingParams(grammar=grammar, **{**base, **kwargs})


@pytest.fixture
def picky() -> Iterator[Callable[..., PickyServer]]:
    started: list[PickyServer] = []

    def start(
        refuse: Callable[[dict[str, Any]], Refusal | None] = lambda r: None,
        reply: Callable[[dict[str, Any]], str] = lambda r: "yes",
    ) -> PickyServer:
        server = PickyServer(refuse, reply).start()
        started.append(server)
        return server

    yield start
    for server in started:
        server.stop()


def served(url: str) -> OpenAIBackend:
    return OpenAIBackend(model="smollm2", base_url=url, timeout_s=120, capabilities=CapabilityRegistry())


def backend(server: PickyServer, **kwargs: Any) -> OpenAIBackend:
    return OpenAIBackend(model="m", base_url=server.url, capabilities=CapabilityRegistry(), **kwargs)


@needs_llama
class TestOnLlamaServer:
    def test_gbnf_grammar_is_honoured_on_every_sample(self, llama_server):
        b = served(llama_server)
        cands = b.sample_sync(Q, params(YES_NO, max_tokens=6, temperature=1.5), k=6)
        assert [c.text for c in cands if c.text not in ("yes", "no")] == []
        assert all(c.grammar == "yes-no" for c in cands)
        assert b.capabilities.refused == frozenset()

    def test_regex_grammar_is_converted_and_honoured(self, llama_server):
        b = served(llama_server)
        ask = [{"role": "user", "content": "Write a sum of two numbers."}]
        cands = b.sample_sync(ask, params(SUM, max_tokens=12), k=4)
        assert all(re.fullmatch(SUM.regex or "", c.text) for c in cands), [c.text for c in cands]
        assert all(c.grammar == "sum" for c in cands)

    def test_without_grammar_the_model_writes_freely(self, llama_server):
        # The control: the same prompt unconstrained is not "yes"/"no" on every sample.
        b = served(llama_server)
        cands = b.sample_sync(Q, params(None, max_tokens=6, temperature=1.5), k=4)
        assert any(c.text not in ("yes", "no") for c in cands)
        assert all(c.grammar is None for c in cands)


OPENAI_UNRECOGNIZED_400 = json.dumps(
    {
        "error": {
            "message": "Unrecognized request argument supplied: grammar",
            "type": "invalid_request_error",
            "param": None,
            "code": None,
        }
    }
)
"""The OpenAI API's answer to a field it does not know (the ``auto`` dialect sends ``grammar``)."""


class TestRefusal:
    @pytest.mark.parametrize(
        "refusal",
        [Refusal(422, GRAMMAR_400), Refusal(400, OPENAI_UNRECOGNIZED_400)],
        ids=["pydantic", "openai"],
    )
    def test_a_refused_grammar_is_dropped_remembered_and_noted(self, picky, refusal):
        server = picky(refuse=lambda r: refusal if "grammar" in r else None)
        b = backend(server)
        [first] = b.sample_sync(Q, params(YES_NO))
        assert [("grammar" in r) for r in server.requests] == [True, False]  # one extra request
        assert first.grammar is None and NOT_HONOURED in first.notes
        assert "grammar" in b.capabilities.refused
        [second] = b.sample_sync(Q, params(YES_NO))
        assert len(server.requests) == 3 and "grammar" not in server.requests[2]  # remembered
        assert second.grammar is None and NOT_HONOURED in second.notes

    def test_every_backend_of_the_server_learns_it_once(self, picky):
        server = picky(refuse=lambda r: Refusal(400, GRAMMAR_400) if "grammar" in r else None)
        registry = CapabilityRegistry()
        OpenAIBackend(model="m", base_url=server.url, capabilities=registry).sample_sync(Q, params(YES_NO))
        other = OpenAIBackend(model="m", base_url=server.url, capabilities=registry)
        cands = other.sample_sync(Q, params(YES_NO), k=3)
        assert sum("grammar" in r for r in server.requests) == 1
        assert all(NOT_HONOURED in c.notes for c in cands)

    def test_a_refusal_of_something_else_keeps_the_grammar(self, picky):
        refuse_seed = json.dumps({"error": {"message": "Unsupported parameter: 'seed'", "param": "seed"}})
        server = picky(refuse=lambda r: Refusal(400, refuse_seed) if "seed" in r else None)
        b = backend(server)
        [cand] = b.sample_sync(Q, params(YES_NO))
        assert b.capabilities.refused == {"seed"}
        assert server.requests[-1]["grammar"] == YES_NO.gbnf and cand.grammar == "yes-no"

    def test_a_server_error_not_naming_the_grammar_is_not_learnt(self, picky):
        from retryctl.models import TerminalBackendError

        server = picky(refuse=lambda r: Refusal(400, json.dumps({"error": {"message": "bad request"}})))
        b = backend(server)
        with pytest.raises(TerminalBackendError):
            b.sample_sync(Q, params(YES_NO))
        assert len(server.requests) == 1 and b.capabilities.refused == frozenset()


class TestDialects:
    @pytest.mark.parametrize(
        ("dialect", "grammar", "fields"),
        [
            ("auto", YES_NO, {"grammar": YES_NO.gbnf}),
            ("llama.cpp", YES_NO, {"grammar": YES_NO.gbnf}),
            ("vllm", YES_NO, {"structured_outputs": {"grammar": YES_NO.gbnf}}),
            ("vllm", SUM, {"structured_outputs": {"regex": SUM.regex}}),
            ("vllm-guided", YES_NO, {"guided_grammar": YES_NO.gbnf}),
            ("vllm-guided", SUM, {"guided_regex": SUM.regex}),
            ("sglang", YES_NO, {"ebnf": YES_NO.gbnf}),
            ("sglang", SUM, {"regex": SUM.regex}),
        ],
    )
    def test_the_dialect_puts_the_grammar_in_its_fields(self, picky, dialect, grammar, fields):
        server = picky(reply=lambda r: "12 + 3" if grammar is SUM else "no")
        [cand] = backend(server, grammar_dialect=dialect).sample_sync(Q, params(grammar))
        sent = server.requests[0]
        assert {k: sent[k] for k in fields} == fields
        assert not (GRAMMAR_FIELDS - set(fields)) & set(sent) and "response_format" not in sent
        assert cand.grammar == grammar.name

    @needs_llama
    def test_llama_cpp_gets_a_regex_as_gbnf(self, picky):
        server = picky(reply=lambda r: "12 + 3")
        [cand] = backend(server).sample_sync(Q, params(SUM))
        gbnf = server.requests[0]["grammar"]
        assert gbnf.startswith("root ::= ") and "[0-9]" in gbnf and "regex" not in server.requests[0]
        assert cand.grammar == "sum"

    def test_dialect_none_sends_no_grammar(self, picky):
        server = picky()
        [cand] = backend(server, grammar_dialect=None).sample_sync(Q, params(YES_NO))
        assert "grammar" not in server.requests[0]
        assert cand.grammar is None
        assert "grammar 'yes-no' not sent (grammar_dialect=None): checked after decoding" in cand.notes

    def test_dialect_none_still_sends_a_json_schema_grammar_as_a_response_format(self, picky):
        server = picky(reply=lambda r: json.dumps({"answer": "yes"}))
        [cand] = backend(server, grammar_dialect=None).sample_sync(Q, params(ANSWER))
        assert server.requests[0]["response_format"]["type"] == "json_schema"
        assert cand.grammar == "answer obj"

    @pytest.mark.parametrize("bad", ["vLLM", "openai", "", 3])
    def test_an_unknown_dialect_is_a_config_error(self, bad):
        with pytest.raises(ConfigError) as err:
            OpenAIBackend(model="m", base_url="http://127.0.0.1:9/v1", grammar_dialect=bad)
        assert err.value.field == "grammar_dialect"

    def test_a_grammar_replaces_the_response_format(self, picky):
        server = picky()
        fmt = {"type": "json_schema", "json_schema": {"name": "a", "schema": SCHEMA}}
        backend(server).sample_sync(Q, params(YES_NO, response_format=fmt))
        assert "response_format" not in server.requests[0] and server.requests[0]["grammar"] == YES_NO.gbnf

    def test_with_tools_the_grammar_is_not_sent(self, picky):
        server = picky()
        tool = {"type": "function", "function": {"name": "calc", "parameters": {"type": "object"}}}
        [cand] = backend(server).sample_sync(Q, params(YES_NO, tools=(tool,)))
        assert "grammar" not in server.requests[0] and "tools" in server.requests[0]
        assert cand.grammar is None and any("not sent with tools" in n for n in cand.notes)

    def test_extra_body_wins_over_the_grammar_field(self, picky):
        server = picky()
        backend(server, extra_body={"grammar": 'root ::= "maybe"'}).sample_sync(Q, params(YES_NO))
        assert server.requests[0]["grammar"] == 'root ::= "maybe"'


class TestJsonSchemaGrammar:
    def test_it_goes_as_a_json_schema_response_format(self, picky):
        server = picky(reply=lambda r: json.dumps({"answer": "yes"}))
        [cand] = backend(server, grammar_dialect="vllm").sample_sync(Q, params(ANSWER))
        fmt = server.requests[0]["response_format"]
        assert fmt == {"type": "json_schema", "json_schema": {"name": "answer_obj", "schema": SCHEMA}}
        assert cand.grammar == "answer obj" and cand.constraint == "strict"

    def test_down_the_ladder_it_holds_where_the_server_enforces_the_schema(self, picky):
        server = picky(
            refuse=lambda r: Refusal(500, LLAMA_CPP_JSON_SCHEMA_500) if mode_of(r) == "json_schema" else None,
            reply=lambda r: json.dumps({"answer": "no"}),
        )
        [cand] = backend(server).sample_sync(Q, params(ANSWER))
        assert [mode_of(r) for r in server.requests] == ["json_schema", "json_object+schema"]
        assert cand.grammar == "answer obj"

    def test_below_the_schema_rungs_it_is_not_honoured(self, picky):
        refuse = {"json_schema", "json_object+schema"}
        server = picky(
            refuse=lambda r: (
                Refusal(500, LLAMA_CPP_JSON_SCHEMA_500.replace("json_schema", mode_of(r)))
                if mode_of(r) in refuse
                else None
            ),
            reply=lambda r: json.dumps({"answer": "no"}),
        )
        b = backend(server)
        b.capabilities.refuse("json_schema")
        b.capabilities.refuse("json_object+schema")
        [cand] = b.sample_sync(Q, params(ANSWER))
        assert mode_of(server.requests[-1]) == "json_object"
        assert cand.grammar is None
        assert "grammar 'answer obj' not honoured by the server: checked after decoding" in cand.notes


class TestRegexCheck:
    def test_a_server_that_ignores_the_regex_is_caught(self, picky):
        server = picky(reply=lambda r: "Sure! 12 plus 3 is 15.")
        [cand] = backend(server, grammar_dialect="sglang").sample_sync(Q, params(SUM))
        assert server.requests[0]["regex"] == SUM.regex
        assert cand.grammar is None
        assert any("regex does not match the output: the server seems to ignore it" in n for n in cand.notes)

    def test_an_output_cut_at_max_tokens_is_not_blamed_on_the_server(self, picky):
        from tests.models._fault_server import FaultServer, raw

        server = FaultServer().start()
        try:
            body = {
                "choices": [{"index": 0, "message": {"content": "12 +"}, "finish_reason": "length"}],
                "usage": {"prompt_tokens": 3, "completion_tokens": 8},
            }
            server.script.append(raw(json.dumps(body).encode()))
            b = OpenAIBackend(
                model="m", base_url=server.url, capabilities=CapabilityRegistry(), grammar_dialect="vllm"
            )
            [cand] = b.sample_sync(Q, params(SUM))
        finally:
            server.stop()
        assert cand.grammar == "sum"
        assert any("stopped (length) before the regex was complete" in n for n in cand.notes)


class TestPlan:
    def test_without_a_grammar_the_params_go_as_they_are(self):
        p = params(None)
        assert grammar_plan(p, "auto", ()).params is p


@needs_llama
class TestUnparsableGbnf:
    def test_it_is_never_sent_to_a_llama_cpp_server(self, picky):
        # python -m llama_cpp.server 0.3.x segfaults on a grammar it cannot parse (seen on this machine).
        server = picky()
        b = backend(server)
        broken = Grammar(name="broken", gbnf='root ::= "yes')
        [cand] = b.sample_sync(Q, params(broken))
        assert "grammar" not in server.requests[0] and cand.grammar is None
        note = "grammar 'broken' (gbnf) cannot be sent to a llama.cpp server: llama.cpp could not parse"
        assert any(n.startswith(note) for n in cand.notes)
        assert b.capabilities.refused == frozenset()  # the grammar's fault, not the server's
        [good] = b.sample_sync(Q, params(YES_NO))
        assert server.requests[1]["grammar"] == YES_NO.gbnf and good.grammar == "yes-no"


@needs_llama
class TestStreamedOnLlamaServer:
    def test_a_streamed_sample_is_decoded_under_the_grammar_too(self, llama_server):
        # cut_below streams each sample (to cut it short); the grammar travels in the same request.
        b = served(llama_server)
        p = params(YES_NO, max_tokens=6, temperature=1.5, logprobs=True, cut_below=0.001)
        for seed in (1, 2, 3):
            [cand] = b.sample_sync(Q, replace(p, seed=seed))
            assert cand.text in ("yes", "no") and cand.grammar == "yes-no" and cand.logprobs
