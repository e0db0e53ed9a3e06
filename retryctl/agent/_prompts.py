"""What the demo agent says to the model, and how it reads the model's answers.

Two ways of answering one arithmetic word problem: the model's own answer (``The answer is N.``) and an
arithmetic expression under a JSON-schema grammar that a tool evaluates. Each has a one-shot example,
because SmolLM2-135M follows a shown format far better than a described one.
"""

from __future__ import annotations

import json
from typing import Any

from retryctl.controller import extract_stated_number, normalise_number
from retryctl.models import Message

__all__ = [
    "DEMO_QUESTION",
    "EXPRESSION_FORMAT",
    "NO_ANSWER",
    "answer_prompt",
    "demo_equivalence",
    "expression_prompt",
    "parse_expression",
]

DEMO_QUESTION = "Mia has 7 boxes of 8 crayons. She loses 5 crayons. How many crayons does she have?"
"""The built-in question. Measured: SmolLM2-135M's own answers at temperature 0.7 disagree (e.g. 10, 15,
13, 2, 10; the answer is 51), while its expressions (``7 * 8 - 5``) agree, so the demo shows a switch."""

_EXAMPLE_QUESTION = "Ann has 5 bags with 3 apples each. She eats 2 apples. How many apples are left?"

_ANSWER_SYSTEM = "You solve arithmetic word problems. Reply with one line: The answer is N."
_EXPRESSION_SYSTEM = (
    "Translate the word problem into one arithmetic expression (numbers with + - * / and "
    "parentheses). Reply as JSON."
)

EXPRESSION_PATTERN = r"^[0-9(][0-9+*/() .-]{0,60}$"
"""Only digits, operators and parentheses: the grammar cannot write anything a calculator refuses."""

EXPRESSION_FORMAT: dict[str, Any] = {
    "type": "json_schema",
    "json_schema": {
        "name": "expression",
        "schema": {
            "type": "object",
            "properties": {"expression": {"type": "string", "pattern": EXPRESSION_PATTERN}},
            "required": ["expression"],
            "additionalProperties": False,
        },
    },
}
"""The OpenAI-style ``response_format`` of an expression: ``{"expression": "7 * 8 - 5"}``."""


def answer_prompt(messages: list[Message]) -> list[Message]:
    """The conversation with the one-shot answer format in front."""
    shot: list[Message] = [
        {"role": "system", "content": _ANSWER_SYSTEM},
        {"role": "user", "content": _EXAMPLE_QUESTION},
        {"role": "assistant", "content": "The answer is 13."},
    ]
    return [*shot, *messages]


def expression_prompt(messages: list[Message]) -> list[Message]:
    """The conversation with the one-shot expression format in front."""
    shot: list[Message] = [
        {"role": "system", "content": _EXPRESSION_SYSTEM},
        {"role": "user", "content": _EXAMPLE_QUESTION},
        {"role": "assistant", "content": json.dumps({"expression": "5 * 3 - 2"})},
    ]
    return [*shot, *messages]


def parse_expression(text: str) -> str:
    """The expression in a model's JSON reply; ``ValueError`` saying what is wrong otherwise."""
    try:
        obj = json.loads(text)
    except ValueError as exc:
        raise ValueError(f"the reply is not JSON ({exc})") from None
    expression = obj.get("expression") if isinstance(obj, dict) else None
    if not isinstance(expression, str) or not expression.strip():
        raise ValueError("the reply has no 'expression' string")
    return expression.strip()


NO_ANSWER = "no answer: "
"""Prefix of a candidate that failed before it had an answer (a refused expression): it agrees with
nothing, whatever numbers its explanation contains."""


def demo_equivalence(text: str) -> str | None:
    """A candidate's answer as an exact number: the number after "the answer is", else the last number.

    Numbers only: a word problem's answer is a number, and "10 crayons" and "10" must agree.
    """
    if text.startswith(NO_ANSWER):
        return None
    found = extract_stated_number(text)
    return normalise_number(found) if found else None
