"""What the demo agent says to the model, and how it reads the model's answers.

Two ways of answering one arithmetic word problem: the model's own answer (``The answer is N.``) and an
arithmetic expression under a grammar that a tool evaluates. Both show the same six worked examples
(:data:`EXAMPLES`), because SmolLM2-135M follows a shown format far better than a described one, and
of different shapes, because it copies the shape of a single example (``5 * 3 - 2``) into every
problem. Measured on the development set: docs/evals.md ("The check as a grammar").
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

# Examples of every shape the demo's problems take, none of them the shape of most: one example
# lends its shape to every answer (a one-shot ``5 * 3 - 2`` made the model write ``X * Y - 2``).
# Phrasings and objects differ from the development set's templates (retryctl/evals/_wordproblems.py).
EXAMPLES: tuple[tuple[str, str, int], ...] = (
    ("A baker makes 6 trays of muffins with 12 muffins on each tray. How many muffins does the baker "
     "make?", "6 * 12", 72),
    ("Dan shares 30 grapes equally among 5 friends. How many grapes does each friend get?", "30 / 5", 6),
    ("Lily has 9 ribbons. Her sister has 25 ribbons. How many more ribbons does her sister have?",
     "25 - 9", 16),
    ("Sara picks 13 plums in the morning and 9 plums in the evening. How many plums does she pick?",
     "13 + 9", 22),
    ("A box holds 3 rows of 5 toys. Jo takes out 4 toys. How many toys are in the box now?",
     "3 * 5 - 4", 11),
    ("Pat buys 4 packs of 6 cups and 2 more cups, then splits them into 2 equal stacks. How many "
     "cups are in each stack?", "(4 * 6 + 2) / 2", 13),
)  # fmt: skip
"""The few-shot examples: (question, expression, answer). Measured on the development set (14
problems of seed 11, docs/evals.md): with all six the expressions that agree 7 of 8 were right every
time; with the first five or the former one-shot example, half the time."""

SHOTS = {"one": 1, "five": 5, "six": 6}
"""Named prompt variants by the number of :data:`EXAMPLES` shown, for measuring them."""

_EXAMPLE_QUESTION = "Ann has 5 bags with 3 apples each. She eats 2 apples. How many apples are left?"

_ANSWER_SYSTEM = "You solve arithmetic word problems. Reply with one line: The answer is N."
_EXPRESSION_SYSTEM = (
    "Translate the word problem into one arithmetic expression (numbers with + - * / and "
    "parentheses). Reply as JSON."
)

ANSWER_SHOTS = "six"
"""The answer prompt's examples (a key of :data:`SHOTS`)."""
EXPRESSION_SHOTS = "six"
"""The expression prompt's examples (a key of :data:`SHOTS`)."""

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


def _examples(shots: str) -> list[tuple[str, str, int]]:
    if shots == "one":  # the former one-shot example, kept to measure against
        return [(_EXAMPLE_QUESTION, "5 * 3 - 2", 13)]
    return list(EXAMPLES[: SHOTS[shots]])


def answer_prompt(messages: list[Message], shots: str = ANSWER_SHOTS) -> list[Message]:
    """The conversation with the answer format's examples in front."""
    shot: list[Message] = [{"role": "system", "content": _ANSWER_SYSTEM}]
    for question, _, answer in _examples(shots):
        shot += [
            {"role": "user", "content": question},
            {"role": "assistant", "content": f"The answer is {answer}."},
        ]
    return [*shot, *messages]


def expression_prompt(messages: list[Message], shots: str = EXPRESSION_SHOTS) -> list[Message]:
    """The conversation with the expression format's examples in front."""
    shot: list[Message] = [{"role": "system", "content": _EXPRESSION_SYSTEM}]
    for question, expression, _ in _examples(shots):
        shot += [
            {"role": "user", "content": question},
            {"role": "assistant", "content": json.dumps({"expression": expression})},
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
