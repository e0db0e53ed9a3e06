"""The demo's prompts, expression parsing and answer equivalence."""

from __future__ import annotations

import re
from fractions import Fraction

import pytest

from retryctl.agent import NO_ANSWER
from retryctl.agent._members import repeated_numbers, ungrounded_numbers, unused_numbers
from retryctl.agent._prompts import (
    EXAMPLES,
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
    def test_the_question_comes_last_after_the_examples(self) -> None:
        question = [{"role": "user", "content": "Q?"}]
        for prompt in (answer_prompt(question), expression_prompt(question)):
            assert prompt[-1] == question[0]
            assert [m["role"] for m in prompt[:-1]] == ["system", *["user", "assistant"] * len(EXAMPLES)]

    def test_every_example_obeys_the_grammar_pattern_and_the_numbers_check(self) -> None:
        pattern = EXPRESSION_FORMAT["json_schema"]["schema"]["properties"]["expression"]["pattern"]
        prompt = expression_prompt([])
        for (question, expression, answer), shown in zip(EXAMPLES, prompt[2::2], strict=True):
            assert parse_expression(shown["content"]) == expression
            assert re.fullmatch(pattern, expression)
            asked = [{"role": "user", "content": question}]
            assert not (
                ungrounded_numbers(expression, asked)
                or unused_numbers(expression, asked)
                or repeated_numbers(expression, asked)
            ), question
            assert Fraction(answer) == _value(expression)

    def test_the_examples_differ_in_shape(self) -> None:
        shapes = {re.sub(r"[0-9]+", "n", e) for _, e, _ in EXAMPLES}
        assert len(shapes) == len(EXAMPLES)
        assert {"n + n", "n - n", "n * n", "n / n"} <= shapes

    def test_the_answer_examples_state_the_answer(self) -> None:
        shown = answer_prompt([])[2::2]
        assert [demo_equivalence(m["content"]) for m in shown] == [str(a) for _, _, a in EXAMPLES]


def _value(expression: str) -> Fraction:
    import ast

    def walk(node: ast.expr) -> Fraction:
        if isinstance(node, ast.Constant):
            return Fraction(str(node.value))
        assert isinstance(node, ast.BinOp)
        left, right = walk(node.left), walk(node.right)
        if isinstance(node.op, ast.Div):
            return left / right
        return {ast.Add: left + right, ast.Sub: left - right, ast.Mult: left * right}[type(node.op)]

    return walk(ast.parse(expression, mode="eval").body)
