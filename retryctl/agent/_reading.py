"""How the demo's checks read a question: its numbers, its words, the constants they imply, and the
checks' own findings, which a refine round quotes back and which are never the user's words.

Shared by the numbers check (:mod:`._members`), the grammars compiled from it (:mod:`._grammars`) and
the operations check (:mod:`._operators`), so that each reads the question the same way.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from types import MappingProxyType

from retryctl.agent._counts import COUNT_FINDING
from retryctl.models import Message

__all__ = ["UNIT_CONSTANTS"]

_NUMBER = re.compile(r"\d+(?:\.\d+)?")
_WORD = re.compile(r"[a-z]+")
UNIT_CONSTANTS: Mapping[str, tuple[str, ...]] = MappingProxyType(
    {
        "0": ("zero", "none", "nothing", "empty"),
        "1": ("one", "once", "half", "halves", "third", "thirds", "quarter", "quarters", "tenth",
              "tenths", "percent", "%"),
        "2": ("two", "twice", "double", "doubles", "half", "halves", "pair", "pairs", "both"),
        "3": ("three", "triple", "third", "thirds"),
        "4": ("four", "quarter", "quarters"),
        "5": ("five",),
        "6": ("six",),
        "7": ("seven", "week", "weeks"),
        "8": ("eight",),
        "9": ("nine",),
        "10": ("ten", "tenth", "tenths"),
        "11": ("eleven",),
        "12": ("twelve", "dozen", "dozens", "month", "months"),
        "24": ("day", "days"),
        "60": ("hour", "hours", "minute", "minutes"),
        "100": ("percent", "%", "cent", "cents", "century"),
        "1000": ("thousand", "thousands", "kilogram", "kilograms", "kilometre", "kilometres", "kilometer",
                 "kilometers", "km", "kg", "litre", "litres", "liter", "liters", "gram", "grams"),
    }
)  # fmt: skip
"""Numbers an expression may use without the question writing them as digits, each with the words
that imply it: ``2`` for "twice" or "half", ``12`` for "dozen", ``60`` for "hours"... ``1`` and ``0``
need a word too ("one", "half" as ``1 / 2``; "none"): under the grammar that holds the model to the
question's numbers, a free ``1`` was its way around them (``9 * 1 + 9``, ``10 + 5 - 1`` on the
development set). A constant without its word in the question is invented: ``5 * 3 + 2`` for "5 trays
of 3 cookies" copies the prompt's example, not the problem."""

# The check's findings, as the candidate's text and the refine feedback quote them. Their own numbers
# are not the user's: a refine round that quotes "uses 2" must not make 2 a number of the question.
_USES = r"uses [0-9., and]+?, which (?:is|are) not in the question"
_REPEATS = r"uses [0-9., and]+? more often than the question gives (?:it|them)"
_LEAVES_OUT = r"leaves out [0-9., and]+?, which the question gives"
_OPS = r"uses [-+*/](?:(?:, | and )[-+*/])*, which no word of the question asks for"
_PART = rf"(?:{_USES}|{_REPEATS}|{_LEAVES_OUT}|{_OPS})"
_FINDING = re.compile(rf"""the expression (?:'[^']*'|"[^"]*") {_PART}(?:; it also {_PART})*""")


def _numbers(text: str) -> list[str]:
    """The numbers written in ``text`` as values (``2.50`` is ``2.5``, ``1,200`` is ``1200``)."""
    return [n.rstrip("0").rstrip(".") if "." in n else n for n in _NUMBER.findall(text.replace(",", ""))]


def _users_words(message: Message) -> str:
    """A user message's text without the checks' own findings quoted back in a refine round (the
    numbers check's and the count check's: "-48 is negative" gives no 48)."""
    return COUNT_FINDING.sub("", _FINDING.sub("", str(message.get("content") or "")))


def _words_of(text: str) -> set[str]:
    """The lower-case words of ``text`` (and ``%``), as :func:`_implied` reads them."""
    return set(_WORD.findall(text.lower())) | ({"%"} if "%" in text else set())


def _implied(number: str, words: set[str]) -> bool:
    """Whether ``number`` is a constant the question's ``words`` imply."""
    implying = UNIT_CONSTANTS.get(number)
    return implying is not None and (not implying or not words.isdisjoint(implying))
