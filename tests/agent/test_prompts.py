"""The demo's prompts, expression parsing and answer equivalence."""

from __future__ import annotations

import re

import pytest

from retryctl.agent import NO_ANSWER
from retryctl.agent._prompts import (
    EXPRESSION_FORMAT,
    answer_prompt,
    demo_equivalence,
    expression_prompt,
    parse_expression,
)


class TestDemoEquivalence:
    @pytest.mark.parametrize(
        ("text", "key"),
        [
            ("The answer is 51.", "51"),
            ("The answer is 51 crayons.", "51"),
            ("7 * 8 - 5 = 51", "51"),
            ("I think 7 boxes... The answer is 1,200", "1200"),
            ("half: The answer is 2.50", "2.5"),
        ],
    )
    def test_numbers_become_exact_keys(self, text: str, key: str) -> None:
        assert demo_equivalence(text) == key

    def test_a_failed_candidate_agrees_with_nothing_whatever_numbers_it_shows(self) -> None:
        assert demo_equivalence(f"{NO_ANSWER}calculator refused '7 *': syntax error at column 3") is None

    def test_text_without_a_number_has_no_answer(self) -> None:
        assert demo_equivalence("To solve this problem, we need") is None


class TestParseExpression:
    def test_reads_the_expression(self) -> None:
        assert parse_expression('{"expression": " 7 * 8 - 5 "}') == "7 * 8 - 5"

    @pytest.mark.parametrize("text", ["7 * 8", '{"expr": "1"}', '{"expression": ""}', "[1]"])
    def test_anything_else_is_a_value_error(self, text: str) -> None:
        with pytest.raises(ValueError, match=r"not JSON|no 'expression'"):
            parse_expression(text)


class TestPrompts:
    def test_the_question_comes_last_after_a_one_shot_example(self) -> None:
        question = [{"role": "user", "content": "Q?"}]
        for prompt in (answer_prompt(question), expression_prompt(question)):
            assert prompt[-1] == question[0]
            assert [m["role"] for m in prompt[:-1]] == ["system", "user", "assistant"]

    def test_the_example_expression_obeys_the_grammar_pattern(self) -> None:
        pattern = EXPRESSION_FORMAT["json_schema"]["schema"]["properties"]["expression"]["pattern"]
        example = parse_expression(expression_prompt([])[-1]["content"])
        assert re.fullmatch(pattern, example)
        assert not re.fullmatch(pattern, "__import__('os')")
