"""The structured-output ladder: which mode a request goes in, what it sends, how its reply is read."""

from __future__ import annotations

import json
from typing import Any

import pytest

from retryctl.models import Candidate, MalformedResponse, SamplingParams, ToolSpec
from retryctl.models._openai_modes import feature_of, plan_for, sent_names, usable_or_raise

SCHEMA = {"type": "object", "properties": {"x": {"type": "integer"}}, "required": ["x"]}
SCHEMA_PARAMS = SamplingParams(
    response_format={"type": "json_schema", "json_schema": {"name": "x", "schema": SCHEMA}}
)
OBJECT_PARAMS = SamplingParams(response_format={"type": "json_object"})
TOOL_PARAMS = SamplingParams(tools=(ToolSpec(name="calc"),))
ASK = [{"role": "user", "content": "x?"}]


class TestPlan:
    @pytest.mark.parametrize(
        ("params", "refused", "mode"),
        [
            (SamplingParams(), {"json_schema"}, "text"),
            (SCHEMA_PARAMS, set(), "json_schema"),
            (SCHEMA_PARAMS, {"json_schema"}, "json_object+schema"),
            (SCHEMA_PARAMS, {"json_schema", "json_object+schema"}, "json_object"),
            (SCHEMA_PARAMS, {"json_schema", "json_object+schema", "json_object"}, "prompt"),
            (OBJECT_PARAMS, set(), "json_object"),
            (OBJECT_PARAMS, {"json_object"}, "prompt"),
            (TOOL_PARAMS, set(), "tools"),
            (TOOL_PARAMS, {"tools"}, "prompt"),
        ],
    )
    def test_the_first_mode_not_refused(self, params, refused, mode):
        assert plan_for(params, refused).mode == mode

    def test_what_each_mode_sends(self):
        native = plan_for(SCHEMA_PARAMS, set())
        assert native.structure(SCHEMA_PARAMS)["response_format"]["type"] == "json_schema"
        assert native.messages(ASK, SCHEMA_PARAMS) == ASK  # the server enforces it: no instruction
        beside = plan_for(SCHEMA_PARAMS, {"json_schema"})
        assert beside.structure(SCHEMA_PARAMS) == {
            "response_format": {"type": "json_object", "schema": SCHEMA}
        }
        bare = plan_for(SCHEMA_PARAMS, {"json_schema", "json_object+schema"})
        assert bare.structure(SCHEMA_PARAMS) == {"response_format": {"type": "json_object"}}
        [system, user] = bare.messages(ASK, SCHEMA_PARAMS)
        assert system["role"] == "system" and json.dumps(SCHEMA) in system["content"] and user == ASK[0]
        prompt = plan_for(SCHEMA_PARAMS, {"json_schema", "json_object+schema", "json_object"})
        assert prompt.structure(SCHEMA_PARAMS) == {}
        tools = plan_for(TOOL_PARAMS, {"tools"})
        assert tools.structure(TOOL_PARAMS) == {}
        assert "calc" in tools.messages(ASK, TOOL_PARAMS)[0]["content"]
        assert plan_for(TOOL_PARAMS, set()).structure(TOOL_PARAMS)["tools"][0]["function"]["name"] == "calc"

    def test_a_system_message_gets_the_instruction_appended(self):
        plan = plan_for(OBJECT_PARAMS, {"json_object"})
        [system, _] = plan.messages([{"role": "system", "content": "Be brief."}, *ASK], OBJECT_PARAMS)
        assert system["content"].startswith("Be brief.\n\n") and "JSON object" in system["content"]

    def test_tool_traffic_becomes_text_for_a_server_without_tools(self):
        history: list[dict[str, Any]] = [
            *ASK,
            {"role": "assistant", "content": "", "tool_calls": [{"id": "1", "function": {"name": "calc"}}]},
            {"role": "tool", "content": "42", "tool_call_id": "1"},
        ]
        sent = plan_for(TOOL_PARAMS, {"tools"}).messages(history, TOOL_PARAMS)
        assert [m["role"] for m in sent] == ["system", "user", "assistant", "user"]
        assert sent[-1]["content"] == "Tool result: 42" and "calc" in sent[2]["content"]

    def test_fallback_replies_are_read_from_prose(self):
        plan = plan_for(SCHEMA_PARAMS, {"json_schema", "json_object+schema", "json_object"})
        reply = Candidate(text='Here: {"y": 1} no, rather ```{"x": 3}``` done', model="m")
        read, problem = plan.read(reply, SCHEMA_PARAMS, 0)
        assert problem is None and read.text == '{"x": 3}' and read.constraint == "none"
        assert "plain prompt" in read.notes[-1]
        junk, problem = plan.read(Candidate(text="{not json", model="m"), SCHEMA_PARAMS, 1)
        assert problem is not None and problem.startswith("not valid JSON") and junk.text == "{not json"

    def test_native_replies_are_passed_through(self):
        plan = plan_for(SCHEMA_PARAMS, set())
        read, problem = plan.read(Candidate(text="prose", model="m"), SCHEMA_PARAMS, 0)
        assert problem is None and read.text == "prose" and read.constraint == "strict"
        assert read.notes == ("structured output: json_schema",)
        plain, _ = plan_for(SamplingParams(), set()).read(
            Candidate(text="hi", model="m"), SamplingParams(), 0
        )
        assert plain.notes == () and plain.constraint is None


class TestFeatureOf:
    def test_a_refused_name_maps_to_the_feature_sent(self):
        plan = plan_for(SCHEMA_PARAMS, {"json_schema"})
        payload = {"response_format": {"type": "json_object", "schema": SCHEMA}, "logprobs": True, "seed": 1}
        assert sent_names(payload) == {"response_format", "json_object", "logprobs", "seed"}
        assert feature_of("response_format", payload, plan) == "json_object+schema"
        assert feature_of("top_logprobs", payload, plan) == "logprobs"
        assert feature_of("seed", payload, plan) == "seed"
        assert feature_of("n", payload, plan) is None  # not sent
        assert feature_of("temperature", {**payload, "temperature": 1.0}, plan) is None  # not droppable
        assert feature_of("tool_choice", {"tools": []}, plan_for(TOOL_PARAMS, set())) == "tools"


class TestUsableOrRaise:
    def test_only_a_call_with_no_usable_reply_fails(self):
        good, bad = Candidate(text="{}", model="m"), Candidate(text="no", model="m")
        assert usable_or_raise([(good, None), (bad, "no JSON")], backend="b") == [good, bad]
        with pytest.raises(MalformedResponse, match="none of the 2 replies"):
            usable_or_raise([(bad, "no JSON"), (bad, "no JSON")], backend="b")
