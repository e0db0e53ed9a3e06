from __future__ import annotations

import pytest

from retryctl.exceptions import ConfigError
from retryctl.models import Candidate, SamplingParams, TokenLogprob, ToolCall, ToolSpec, Usage


class TestSamplingParams:
    @pytest.mark.parametrize(
        ("field", "value"),
        [
            ("temperature", -0.1),
            ("temperature", float("nan")),
            ("top_p", 0.0),
            ("top_p", 1.5),
            ("top_k", 0),
            ("min_p", 2.0),
            ("seed", -1),
            ("max_tokens", 0),
            ("top_logprobs", 21),
        ],
    )
    def test_bad_values_name_the_field(self, field, value):
        with pytest.raises(ConfigError) as info:
            SamplingParams(**{field: value})
        assert info.value.field == field and str(value) in str(info.value)

    def test_stop_string_and_tool_dicts_are_coerced(self):
        params = SamplingParams(
            stop="END",  # type: ignore[arg-type]
            tools=({"type": "function", "function": {"name": "calc", "description": "d"}},),  # type: ignore[arg-type]
        )
        assert params.stop == ("END",)
        assert params.tools == (ToolSpec(name="calc", description="d"),)

    def test_response_format_is_checked(self):
        with pytest.raises(ConfigError, match="response_format"):
            SamplingParams(response_format={"type": "xml"})
        with pytest.raises(ConfigError, match="json_schema"):
            SamplingParams(response_format={"type": "json_schema", "json_schema": {}})
        schema = {"type": "object"}
        params = SamplingParams(
            response_format={"type": "json_schema", "json_schema": {"name": "x", "schema": schema}}
        )
        assert params.json_schema == schema and params.wants_json
        assert not SamplingParams(response_format={"type": "text"}).wants_json
        assert SamplingParams(response_format={"type": "json_object"}).json_schema is None

    def test_frozen(self):
        with pytest.raises(AttributeError):
            SamplingParams().temperature = 0.5  # type: ignore[misc]


class TestToolSpec:
    def test_round_trips_the_openai_shape(self):
        spec = ToolSpec.coerce({"name": "calc", "parameters": {"type": "object", "properties": {}}})
        assert ToolSpec.coerce(spec.to_openai()) == spec

    def test_bad_name_or_shape(self):
        with pytest.raises(ConfigError, match=r"tools\.name"):
            ToolSpec(name="two words")
        with pytest.raises(ConfigError, match="needs a 'name'"):
            ToolSpec.coerce({"function": {}})


class TestUsage:
    def test_adds_up(self):
        total = Usage(3, 4) + Usage(1, 2)
        assert total == Usage(4, 6) and total.total_tokens == 10


class TestToolCall:
    def test_arguments_parse_or_fail_clearly(self):
        assert ToolCall(name="f", arguments_json='{"a": 1}').arguments() == {"a": 1}
        with pytest.raises(ValueError, match="not a JSON object"):
            ToolCall(name="f", arguments_json="[1]").arguments()


class TestCandidate:
    def test_token_logprobs(self):
        cand = Candidate(
            text="ab",
            model="m",
            logprobs=(TokenLogprob("a", -0.1), TokenLogprob("b", -0.2)),
        )
        assert cand.token_logprobs == (-0.1, -0.2)
        assert Candidate(text="x", model="m").token_logprobs is None


class TestLoneSurrogates:
    # A JSON escape "\ud800" decodes to a lone surrogate, which UTF-8 (the decision log) cannot carry.
    def test_candidate_text_and_answer_become_writable(self):
        c = Candidate(text="a\ud800b \U0001f600", model="m", answer="\udc00")
        assert c.text == "a\ufffdb \U0001f600" and c.answer == "\ufffd"
        c.text.encode()

    def test_tool_call_name_and_arguments_become_writable(self):
        call = ToolCall(name="f\udc00", arguments_json='{"q": "\ud800"}')
        assert call.name == "f\ufffd" and call.arguments() == {"q": "\ufffd"}

    def test_valid_text_is_kept_as_it_is(self):
        text = "ünïcode \U0001f600 text"
        assert Candidate(text=text, model="m").text is text
