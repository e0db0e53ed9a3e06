from __future__ import annotations

import json

import pytest

from retryctl.exceptions import ConfigError
from retryctl.models import ConstraintPolicy, SamplingParams, ToolSpec
from retryctl.models._constraints import check_structured, schema_for, structure_instruction

CALC = ToolSpec(
    name="calc",
    description="math",
    parameters={"type": "object", "properties": {"e": {"type": "string"}}, "required": ["e"]},
)
NOTE = ToolSpec(name="note")
SCHEMA = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}
AS_SCHEMA = {"type": "json_schema", "json_schema": {"name": "s", "schema": SCHEMA}}


class TestConstraintPolicy:
    def test_modes(self):
        assert ConstraintPolicy().modes() == ["strict", "strict", "lenient"]
        assert ConstraintPolicy(strict_attempts=1, relax=False).modes() == ["strict"]

    def test_bad_values_name_the_field(self):
        with pytest.raises(ConfigError, match="strict_attempts"):
            ConstraintPolicy(strict_attempts=0)


class TestSchemaFor:
    def test_free_text_has_no_schema(self):
        assert schema_for(SamplingParams(), "strict") is None

    def test_one_tool_pins_name_and_arguments(self):
        schema = schema_for(SamplingParams(tools=(CALC,)), "strict")
        assert schema is not None
        assert schema["properties"]["name"] == {"const": "calc"}
        assert schema["properties"]["arguments"] == dict(CALC.parameters)

    def test_several_tools_are_alternatives(self):
        schema = schema_for(SamplingParams(tools=(CALC, NOTE)), "strict")
        assert schema is not None and len(schema["anyOf"]) == 2

    def test_lenient_tool_schema_keeps_only_the_envelope(self):
        schema = schema_for(SamplingParams(tools=(CALC, NOTE)), "lenient")
        assert schema is not None
        assert schema["properties"]["name"] == {"enum": ["calc", "note"]}
        assert schema["properties"]["arguments"] == {"type": "object"}

    def test_response_formats(self):
        assert schema_for(SamplingParams(response_format=AS_SCHEMA), "strict") == SCHEMA
        assert schema_for(SamplingParams(response_format=AS_SCHEMA), "lenient") == {"type": "object"}
        assert schema_for(SamplingParams(response_format={"type": "json_object"}), "strict") == {
            "type": "object"
        }


class TestCheckStructured:
    def test_valid_tool_call(self):
        params = SamplingParams(tools=(CALC,))
        text = '{"name": "calc", "arguments": {"e": "1+1"}}'
        out = check_structured(text, params, "id1")
        assert out.problem is None and out.tool_calls[0].arguments() == {"e": "1+1"}
        assert out.tool_calls[0].id == "id1"

    @pytest.mark.parametrize(
        ("text", "problem"),
        [
            ('{"name": "calc", "arguments": {"e": "1', "not valid JSON"),
            ('{"name": "other", "arguments": {}}', "unknown tool"),
            ('{"name": "calc", "arguments": []}', "not a JSON object"),
            ('{"name": "calc", "arguments": {}}', "missing required arguments ['e']"),
            ("[1]", "must be a JSON object"),
        ],
    )
    def test_bad_tool_calls(self, text, problem):
        out = check_structured(text, SamplingParams(tools=(CALC,)), "id")
        assert out.problem is not None and problem in out.problem and out.tool_calls == ()

    def test_raw_control_characters_in_strings_are_accepted(self):
        out = check_structured(
            '{"name": "calc", "arguments": {"e": "a\nb"}}', SamplingParams(tools=(CALC,)), "i"
        )
        assert out.problem is None and json.loads(out.tool_calls[0].arguments_json)["e"] == "a\nb"

    def test_json_answers(self):
        params = SamplingParams(response_format=AS_SCHEMA)
        assert check_structured('{"a": 1}', params, "i").problem is None
        assert "missing required ['a']" in (check_structured("{}", params, "i").problem or "")
        assert "not a JSON object" in (check_structured("3", params, "i").problem or "")


class TestStructureInstruction:
    def test_names_every_tool_and_the_schema(self):
        text = structure_instruction(SamplingParams(tools=(CALC, NOTE))) or ""
        assert "calc" in text and "note" in text and '"required": ["e"]' in text
        assert "JSON schema" in (structure_instruction(SamplingParams(response_format=AS_SCHEMA)) or "")
        assert structure_instruction(SamplingParams()) is None
