"""The group's members: the model's own answers, and tools fed by the model's expressions."""

from __future__ import annotations

import asyncio

import pytest

from retryctl.agent import NO_ANSWER, AnswerBackend, ToolBackend, demo_equivalence, ungrounded_numbers
from retryctl.exceptions import ConfigError
from retryctl.models import SamplingParams
from retryctl.testing import ScriptedBackend
from retryctl.tools import CalculatorTool, PythonTool

Q = [{"role": "user", "content": "Mia has 7 boxes of 8 crayons. She loses 5. How many are left?"}]


class TestAnswerBackend:
    def test_shows_the_format_and_caps_the_answer_length(self) -> None:
        model = ScriptedBackend(["The answer is 51."], model="m")
        [cand] = AnswerBackend(model, max_tokens=16).sample_sync(Q, SamplingParams(max_tokens=40))
        assert cand.text == "The answer is 51."
        [call] = model.calls
        assert call.params.max_tokens == 16
        assert call.messages[-1] == Q[0] and call.messages[0]["role"] == "system"
        assert AnswerBackend(model).name == "m"


class TestToolBackend:
    def test_the_calculator_evaluates_each_expression_exactly(self) -> None:
        model = ScriptedBackend(['{"expression": "7 * 8 - 5"}', '{"expression": "1 / 3"}'], model="m")
        tool = ToolBackend(model, CalculatorTool())
        first, second = tool.sample_sync(Q, SamplingParams(temperature=0.9, seed=1), k=2)
        assert (first.text, first.answer) == ("7 * 8 - 5 = 51", "51")
        assert (second.answer, demo_equivalence(second.text)) == ("1/3", "1/3")
        [call] = model.calls
        assert call.params.response_format is not None
        assert call.params.response_format["json_schema"]["name"] == "expression"
        assert call.params.temperature == 0.2  # an expression is a translation: near-greedy
        assert tool.name == "calculator"

    def test_a_refused_expression_is_a_candidate_without_an_answer(self) -> None:
        model = ScriptedBackend(['{"expression": "7 * * 8"}', "not json"], model="m")
        bad, garbage = ToolBackend(model, CalculatorTool()).sample_sync(Q, k=2)
        assert bad.answer is None and bad.text.startswith(NO_ANSWER) and "calculator" in bad.text
        assert garbage.answer is None and "not JSON" in garbage.text
        assert demo_equivalence(bad.text) is None

    def test_python_runs_the_expression_in_the_sandbox(self) -> None:
        model = ScriptedBackend(['{"expression": "7 * 8 - 5"}', '{"expression": "1 / 0"}'], model="m")
        ok, failed = asyncio.run(ToolBackend(model, PythonTool()).sample(Q, k=2))
        assert (ok.text, ok.answer) == ("7 * 8 - 5 = 51", "51")
        assert failed.answer is None and "python refused" in failed.text

    def test_keeps_the_models_logprobs_and_usage(self) -> None:
        reply = '{"expression": "2 + 2"}'
        model = ScriptedBackend([reply], model="m", confidence=0.5)
        [cand] = ToolBackend(model, CalculatorTool()).sample_sync(Q)
        # The scripted model makes one token per word, each with logprob log(0.5).
        assert cand.token_logprobs == pytest.approx([-0.6931471805599453] * len(reply.split()))
        assert cand.usage.output_tokens == len(reply.split())

    def test_a_tool_without_an_adapter_is_a_config_error(self) -> None:
        other = CalculatorTool(name="abacus")
        with pytest.raises(ConfigError, match="adapter"):
            ToolBackend(ScriptedBackend([]), other)

    def test_an_expression_with_numbers_the_question_never_gave_is_refused(self) -> None:
        model = ScriptedBackend(['{"expression": "50000"}'], model="m")
        france = [{"role": "user", "content": "What is the capital of France?"}]
        [cand] = ToolBackend(model, CalculatorTool()).sample_sync(france)
        assert cand.answer is None and "50000" in cand.text and "does not mention" in cand.text


class TestUngroundedNumbers:
    def test_numbers_of_the_question_and_unit_constants_are_grounded(self) -> None:
        question = [{"role": "user", "content": "A 1,200 m walk at 2.50 m/s, plus 45 s rest?"}]
        assert ungrounded_numbers("1200 / 2.5 + 45 + 60 * 0", question) == []
        assert ungrounded_numbers("1200 / 3.5 + 46", question) == ["3.5", "46"]

    def test_only_the_users_messages_count(self) -> None:
        said = [{"role": "assistant", "content": "maybe 99"}, {"role": "user", "content": "7 boxes"}]
        assert ungrounded_numbers("7 * 99", said) == ["99"]
