"""The operations a question's words ask for: the numbers check's twin for ``+ - * /``.

SmolLM2-135M, held by the grammar to a question's numbers, still reaches for ``*`` first: ``36 * 16``
for "36 cookies on a table and 16 on a chair: how many in all?", ``12 * 7`` for "12 bottles, loses 7",
each written by most of its samples, so the controller saw agreement and accepted (set A of the
development set: 4 of the 11 accepted answers of a run before this check were such products). An
operation is *invited* by the words that ask for it, as a constant is implied by its word
(:data:`~retryctl.agent._members.UNIT_CONSTANTS`): "each", "per" or "times" invite ``*``; "share",
"equally" or "among" invite ``/``; "left", "gave" or "loses" invite ``-``; "and", "more" or "in all"
invite ``+``. The operators themselves (``+``, "plus", "minus"...) invite themselves. A question with
no such word invites all four: the check never refuses what it cannot read.

The lists are ordinary English for the four operations, written from the words' meaning, not from
the development set's templates (the held-out family, :mod:`retryctl.evals._heldout`, was never read
while writing them).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from types import MappingProxyType

from retryctl.agent._reading import _users_words
from retryctl.models import Message

__all__ = ["OPERATIONS", "OPERATOR_WORDS", "invited_operators", "uninvited_operators"]

OPERATIONS = ("+", "-", "*", "/")
"""The operators an expression may use, in the order grammars list them."""

OPERATOR_WORDS: Mapping[str, frozenset[str]] = MappingProxyType(
    {
        "+": frozenset((
            "and", "plus", "more", "total", "sum", "altogether", "together", "combined", "all", "gets",
            "get", "got", "buys", "buy", "bought", "adds", "add", "added", "finds", "found", "receives",
            "received", "collects", "collected", "gains", "gained", "another", "extra", "also", "both",
            "increases", "increased", "joins", "joined", "picks", "picked", "earns", "earned", "makes",
            "made", "brings", "brought"
        )),
        "-": frozenset((
            "minus", "left", "lose", "loses", "lost", "give", "gives", "gave", "away", "sell", "sells",
            "sold", "spend", "spends", "spent", "eat", "eats", "ate", "use", "uses", "used", "take",
            "takes", "took", "remove", "removes", "removed", "fewer", "less", "remain", "remains",
            "remaining", "difference", "break", "breaks", "broke", "drop", "drops", "dropped", "than",
            "leaves", "pay", "pays", "paid", "subtract", "subtracted"
        )),
        "*": frozenset((
            "times", "each", "every", "per", "of", "rows", "groups", "twice", "double", "triple",
            "multiplied", "multiply", "product", "dozen", "dozens"
        )),
        "/": frozenset((
            "divided", "divide", "divides", "share", "shares", "shared", "split", "splits", "equally",
            "equal", "among", "between", "per", "each", "half", "halves", "average", "ratio", "quotient"
        )),
    }
)  # fmt: skip
"""The words that invite each operation (lower case, whole words)."""

_SYMBOLS = {"+": "+", "-": "-", "*": "*×", "/": "/÷"}
_TIMES_X = re.compile(r"\d\s*x\s*\d")  # "3x4", "3 x 4": an x between digits is a product
_WORD = re.compile(r"[a-z]+")
_OPERATOR = re.compile(r"(?<=\S) ([-+*/]) (?=\S)|(?<=[\d)])([-+*/])(?=[\d(])")


def invited_operators(text: str) -> tuple[str, ...]:
    """The operations ``text`` invites (all four when no word or symbol invites any)."""
    words = set(_WORD.findall(text.lower()))
    found = tuple(
        op
        for op in OPERATIONS
        if not words.isdisjoint(OPERATOR_WORDS[op])
        or any(symbol in text for symbol in _SYMBOLS[op])
        or (op == "*" and _TIMES_X.search(text) is not None)
    )
    return found or OPERATIONS


def _question(messages: Sequence[Message]) -> str | None:
    # The checks' findings quoted back by a refine round are not the user's words.
    question = next((m for m in messages if m.get("role") == "user"), None)
    return None if question is None else _users_words(question)


def uninvited_operators(expression: str, messages: Sequence[Message]) -> list[str]:
    """The operators of ``expression`` that the question (the first user message) does not invite,
    each listed once, in :data:`OPERATIONS` order."""
    text = _question(messages)
    if text is None:
        return []
    invited = invited_operators(text)
    used = {a or b for a, b in _OPERATOR.findall(expression)}
    return [op for op in OPERATIONS if op in used and op not in invited]
