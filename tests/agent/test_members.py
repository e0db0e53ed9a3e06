"""The group's members: the model's own answers, and tools fed by the model's expressions."""

from __future__ import annotations

import asyncio

import pytest

from retryctl.agent import NO_ANSWER
from retryctl.agent._members import (
    NUMBERS_CHECK,
    UNIT_CONSTANTS,
    AnswerBackend,
    ToolBackend,
    numbers_from_question,
    repeated_numbers,
    ungrounded_numbers,
    unused_numbers,
)
from retryctl.agent._prompts import demo_equivalence
from retryctl.controller import Observation, Tally, ValidatorResult, decide
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
        model = ScriptedBackend(['{"expression": "7 * 8 - 5"}', '{"expression": "7 / (8 - 5)"}'], model="m")
        tool = ToolBackend(model, CalculatorTool())
        # "shared equally" asks for a division (retryctl.agent._operators): 7 / 3 reaches the tool.
        shared = [{"role": "user", "content": f"{Q[0]['content']} They are shared equally."}]
        first, second = tool.sample_sync(shared, SamplingParams(temperature=0.9, seed=1), k=2)
        assert (first.text, first.answer) == ("7 * 8 - 5 = 51", "51")
        assert (second.answer, demo_equivalence(second.text)) == ("7/3", "7/3")
        [call] = model.calls
        assert call.params.response_format is not None
        assert call.params.response_format["json_schema"]["name"] == "expression"
        # The step's temperature: near-greedy translations would be one translation printed k times.
        assert call.params.temperature == 0.9
        assert first.temperature is None  # drawn at the temperature asked for
        pinned = ToolBackend(
            ScriptedBackend(['{"expression": "7 * 8 - 5"}']), CalculatorTool(), temperature=0.2
        )
        [drawn] = pinned.sample_sync(Q, SamplingParams(temperature=0.9))
        assert drawn.temperature == 0.2  # says so when it decodes at its own
        assert tool.name == "calculator"

    def test_a_refused_expression_is_a_candidate_without_an_answer(self) -> None:
        model = ScriptedBackend(['{"expression": "7 * * 8 - 5"}', "not json"], model="m")
        bad, garbage = ToolBackend(model, CalculatorTool()).sample_sync(Q, k=2)
        assert bad.answer is None and bad.text.startswith(NO_ANSWER) and "calculator" in bad.text
        assert garbage.answer is None and "not JSON" in garbage.text
        assert demo_equivalence(bad.text) is None

    def test_words_around_the_arithmetic_are_dropped_when_no_grammar_held_the_model(self) -> None:
        # A server that takes the schema only in the prompt lets the model write words around it.
        model = ScriptedBackend(
            [
                '{"expression": "Mia has 7 * 8 - 5"}',
                '{"expression": "7 * 8 - 5 = 51 crayons"}',
                '{"expression": "a"}',
            ],
            model="m",
        )
        prose, equation, words = ToolBackend(model, CalculatorTool()).sample_sync(Q, k=3)
        assert (prose.text, prose.answer) == ("7 * 8 - 5 = 51", "51")
        assert (equation.text, equation.answer) == ("7 * 8 - 5 = 51", "51")
        assert words.answer is None and "leaves out 7, 8 and 5" in words.text

    def test_python_runs_the_expression_in_the_sandbox(self) -> None:
        model = ScriptedBackend(
            ['{"expression": "7 * 8 - 5"}', '{"expression": "(7 * 8 - 5) / 0"}'], model="m"
        )
        # "none" makes 0 a number of the question (UNIT_CONSTANTS): the division reaches python.
        # ("shared equally" asks for the division itself.)
        asked = [{"role": "user", "content": f"{Q[0]['content']} None are broken or shared equally."}]
        ok, failed = asyncio.run(ToolBackend(model, PythonTool()).sample(asked, k=2))
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
        assert cand.answer is None
        assert cand.text == f"{NO_ANSWER}the expression '50000' uses 50000, which is not in the question"
        assert numbers_from_question(cand.text) == ValidatorResult(
            NUMBERS_CHECK, False, "the expression '50000' uses 50000, which is not in the question"
        )


class TestUngroundedNumbers:
    def test_numbers_of_the_question_and_unit_constants_are_grounded(self) -> None:
        question = [{"role": "user", "content": "A 1,200 m walk at 2.50 m/s, plus 45 s rest, in minutes?"}]
        assert ungrounded_numbers("(1200 / 2.5 + 45) / 60", question) == []
        assert ungrounded_numbers("1200 / 3.5 + 46", question) == ["3.5", "46"]

    def test_only_the_users_messages_count(self) -> None:
        said = [{"role": "assistant", "content": "maybe 99"}, {"role": "user", "content": "7 boxes"}]
        assert ungrounded_numbers("7 * 99", said) == ["99"]

    def test_the_checks_own_finding_in_a_refine_round_does_not_ground_its_number(self) -> None:
        finding = "the expression '7 * 8 - 15' uses 15, which is not in the question"
        refined = [
            *Q,
            {"role": "assistant", "content": f"{NO_ANSWER}{finding}"},
            {"role": "user", "content": f"The answer failed these checks: {NUMBERS_CHECK}: {finding}."},
        ]
        assert ungrounded_numbers("7 * 8 - 15", refined) == ["15"]
        # A person who gives the number in their own words does ground it.
        told = [*refined, {"role": "user", "content": "She also gave away 15 crayons."}]
        assert ungrounded_numbers("7 * 8 - 15", told) == []

    def test_each_invented_number_is_named_once(self) -> None:
        assert ungrounded_numbers("15 * 40 + 15", Q) == ["15", "40"]

    def test_a_constant_is_grounded_by_the_word_that_implies_it(self) -> None:
        assert {"1", "2", "7", "10", "12", "24", "60", "100"} <= UNIT_CONSTANTS.keys()
        said = [
            {"role": "user", "content": "For 3 days, twice an hour, a dozen eggs, none lost: what percent?"}
        ]
        assert ungrounded_numbers("3 * 24 * 60 * 2 / 100 + 12 + 1 + 0", said) == []

    def test_a_constant_without_its_word_is_invented(self) -> None:
        # The prompt's example is 5 * 3 - 2; copying its "- 2" into another problem invents the 2.
        trays = [{"role": "user", "content": "There are 5 trays with 3 cookies in each. How many cookies?"}]
        assert ungrounded_numbers("5 * 3 + 2", trays) == ["2"]
        assert ungrounded_numbers("5 * 3 * 60", trays) == ["60"]
        assert ungrounded_numbers("5 * 3 + 1 - 0", trays) == ["1", "0"]  # 0 and 1 need a word too
        half = [{"role": "user", "content": "Ann has 5 trays and eats half of one. How many are left?"}]
        assert ungrounded_numbers("5 - 1 / 2", half) == []

    def test_numbers_written_as_words_ground_their_digits(self) -> None:
        said = [{"role": "user", "content": "Mia has seven boxes of 8 crayons and loses half of them."}]
        assert ungrounded_numbers("7 * 8 / 2", said) == []


class TestUnusedNumbers:
    def test_a_copy_of_the_prompts_example_leaves_out_the_questions_numbers(self) -> None:
        # The one-shot example's expression is 5 * 3 - 2; the question gives 7, 8 and 5.
        assert unused_numbers("5 * 3 - 2", Q) == ["7", "8"]
        assert unused_numbers("7 * 8 - 5", Q) == []
        assert unused_numbers("(7 * 8) - 5 + 0", Q) == []

    def test_only_the_question_counts_not_later_rounds(self) -> None:
        finding = "the expression '5 * 3 - 2' leaves out 7 and 8, which the question gives"
        refined = [
            *Q,
            {"role": "assistant", "content": f"{NO_ANSWER}{finding}"},
            {"role": "user", "content": f"The answer failed these checks: {NUMBERS_CHECK}: {finding}. 99"},
        ]
        assert unused_numbers("7 * 8 - 5", refined) == []

    def test_numbers_compare_as_written_values(self) -> None:
        question = [{"role": "user", "content": "A 1,200 m walk at 2.50 m/s?"}]
        assert unused_numbers("1200 / 2.5", question) == []
        assert unused_numbers("1200 / 2", question) == ["2.5"]

    def test_a_copied_expression_is_refused_with_the_numbers_named(self) -> None:
        model = ScriptedBackend(['{"expression": "5 * 3 - 2"}'])
        [cand] = ToolBackend(model, CalculatorTool()).sample_sync(Q)
        finding = (
            "the expression '5 * 3 - 2' uses 3 and 2, which are not in the question; "
            "it also leaves out 7 and 8, which the question gives"
        )
        assert cand.answer is None and cand.text == f"{NO_ANSWER}{finding}"
        assert numbers_from_question(cand.text) == ValidatorResult(NUMBERS_CHECK, False, finding)


class TestNumbersFromQuestion:
    @pytest.mark.parametrize(
        ("expression", "evidence"),
        [
            (
                "7 * 8 - 15",
                "the expression '7 * 8 - 15' uses 15, which is not in the question; "
                "it also leaves out 5, which the question gives",
            ),
            (
                "7 * 8 * 40 - 5 - 15",
                "the expression '7 * 8 * 40 - 5 - 15' uses 40 and 15, which are not in the question",
            ),
            (
                "7 * 8 - 5 - 13 - 14 - 15",
                "the expression '7 * 8 - 5 - 13 - 14 - 15' uses 13, 14 and 15, which are not in the question",
            ),
            ("7 * 8", "the expression '7 * 8' leaves out 5, which the question gives"),
        ],
    )
    def test_an_invented_number_fails_the_check_naming_it(self, expression: str, evidence: str) -> None:
        model = ScriptedBackend([f'{{"expression": "{expression}"}}'], model="m")
        [cand] = ToolBackend(model, CalculatorTool()).sample_sync(Q)
        assert numbers_from_question(cand.text) == ValidatorResult(NUMBERS_CHECK, False, evidence)

    def test_a_quoted_expression_is_read_back_too(self) -> None:
        model = ScriptedBackend(['{"expression": "Mia\'s 15"}'], model="m")
        [cand] = ToolBackend(model, CalculatorTool()).sample_sync(Q)
        result = numbers_from_question(cand.text)
        assert not result.passed and "uses 15, which is not in the question" in result.evidence

    @pytest.mark.parametrize(
        "text",
        [
            "7 * 8 - 5 = 51",
            "The answer is 51.",
            f"{NO_ANSWER}calculator refused '7 *': syntax error at column 3",
            f"{NO_ANSWER}the reply is not JSON (Expecting value)",
        ],
    )
    def test_anything_else_passes(self, text: str) -> None:
        assert numbers_from_question(text) == ValidatorResult(NUMBERS_CHECK, True)

    def test_the_refine_feedback_names_the_check_and_the_number(self) -> None:
        model = ScriptedBackend(['{"expression": "7 * 8 - 5 - 15"}'] * 3, model="m")
        candidates = ToolBackend(model, CalculatorTool()).sample_sync(Q, k=3)
        verdict = decide(
            Observation(
                target="calculator",
                tally=Tally.of([c.answer for c in candidates]),
                validators=[numbers_from_question(candidates[0].text)],
            )
        )
        assert verdict.action == "refine"
        assert verdict.feedback == (
            "The answer failed these checks: numbers_from_question: the expression '7 * 8 - 5 - 15' uses "
            "15, which is not in the question. Correct it and answer again."
        )
        assert "consistent" not in verdict.feedback


class TestRepeatedNumbers:
    def test_a_number_counted_twice_is_refused_and_named(self) -> None:
        eva = [{"role": "user", "content": "Eva has 11 apples and loses 10. How many apples are left?"}]
        assert repeated_numbers("11 * 10 - 10", eva) == ["10"]
        assert repeated_numbers("11 - 10", eva) == []
        model = ScriptedBackend(['{"expression": "11 - 10 - 10"}'], model="m")
        [cand] = ToolBackend(model, CalculatorTool()).sample_sync(eva)
        finding = "the expression '11 - 10 - 10' uses 10 more often than the question gives it"
        assert (cand.answer, cand.text) == (None, f"{NO_ANSWER}{finding}")
        assert numbers_from_question(cand.text) == ValidatorResult(NUMBERS_CHECK, False, finding)

    def test_a_number_the_question_writes_twice_is_needed_twice(self) -> None:
        zoe = [{"role": "user", "content": "Zoe buys 2 decks of 7 cards and 9 decks of 7 cards. How many?"}]
        assert unused_numbers("2 * 9 * 7", zoe) == ["7"]
        assert unused_numbers("2 * 7 + 9 * 7", zoe) == []
        assert repeated_numbers("2 * 7 + 9 * 7", zoe) == []

    def test_a_number_the_words_imply_may_be_used_again(self) -> None:
        twice = [{"role": "user", "content": "Ann has 5 apples and Bob has twice as many. How many in all?"}]
        assert repeated_numbers("5 + 5 * 2", twice) == ["5"]  # 5 is counted twice: refused (documented)
        halves = [{"role": "user", "content": "Cut 2 cakes in half. How many pieces?"}]
        assert repeated_numbers("2 * 2", halves) == []  # "half" implies a 2 of its own

    def test_every_part_of_a_finding_is_read_back(self) -> None:
        finding = (
            "the expression '5 * 5 - 2' uses 2, which is not in the question; it also uses 5 more often "
            "than the question gives it; it also leaves out 7, which the question gives"
        )
        expected = ValidatorResult(NUMBERS_CHECK, False, finding)
        assert numbers_from_question(f"{NO_ANSWER}{finding}") == expected
