"""A domain check for counts: the answer to "how many <things>" is a whole number, at least 0.

The grammar holds an expression to the question's numbers but not to their order: ``18 - 66`` for
"had 66 pens and gave away 18" uses the right numbers and answers -48 pens, and ``36 * 9`` for
"shares 36 among 9" answers the wrong way round (whole, but the check below cannot know that; a
``36 / 9`` the other way round would give a fraction, which it catches). A question that says
otherwise (a temperature, a debt, an average, a measure such as hours or dollars) is exempt as far as
it says so.

The members know the question, the step's validators see only the best candidate's text: a member
writes the finding into its candidate's text (after the answer, so that the answer read from it is
unchanged) and :func:`whole_counts` reads it back, so that the ``refine`` feedback names the count.
"""

from __future__ import annotations

import re
from fractions import Fraction

from retryctl.controller import ValidatorResult

__all__ = [
    "COUNTS_CHECK",
    "COUNT_FINDING",
    "count_finding",
    "counted_things",
    "whole_counts",
    "with_count_finding",
]

COUNTS_CHECK = "whole_counts"
"""The check's name in verdicts and refine feedback."""

_HOW_MANY = re.compile(r"\bhow many\s+(?:more\s+|fewer\s+|less\s+)?([a-z]+)", re.IGNORECASE)
_VERBS = frozenset(
    ("are", "is", "were", "was", "do", "does", "did", "will", "can", "could", "would", "should", "have",
     "has", "had", "of", "in", "on", "left", "there")
)  # fmt: skip
# Measures come in fractions ("2.5 hours"); the sign still holds.
_MEASURES = frozenset(
    ("dollars", "dollar", "cents", "euros", "pounds", "hours", "hour", "minutes", "minute", "seconds",
     "days", "weeks", "months", "years", "kilograms", "kilogram", "kg", "grams", "gram", "litres",
     "liters", "litre", "liter", "metres", "meters", "metre", "meter", "miles", "mile", "kilometres",
     "kilometers", "km", "cups", "cup", "inches", "feet", "percent", "points", "times")
)  # fmt: skip
_SIGNED = frozenset(
    ("negative", "below", "temperature", "temperatures", "degrees", "owe", "owes", "owed", "debt",
     "overdrawn")
)  # fmt: skip
_FRACTIONAL = frozenset(("fraction", "fractions", "decimal", "average", "mean", "ratio"))
_MARK = " (count check: "
_FINDING = re.compile(
    r"'how many [a-z ]+' (?:is a count of [a-z ]+, and \S+ is negative"
    r"|asks for a whole number of [a-z ]+, and \S+ is not one)"
)
COUNT_FINDING = _FINDING
"""The check's finding as its text and the refine feedback quote it: its number is not the user's."""


def counted_things(question: str) -> str | None:
    """What the question counts (``"pens"`` for "How many pens are left?", ``"things"`` for "How
    many are left?"), or ``None`` when it asks for no count or says a count may be negative."""
    found = _HOW_MANY.search(question)
    if found is None:
        return None
    words = set(re.findall(r"[a-z]+", question.lower()))
    if not words.isdisjoint(_SIGNED):
        return None
    thing = found.group(1).lower()
    return "things" if thing in _VERBS else thing


def count_finding(question: str, answer: str | None) -> str | None:
    """Why ``answer`` cannot answer the question's "how many", or ``None`` when it can (or the
    question counts nothing, or the answer is no number)."""
    thing = counted_things(question)
    if thing is None or answer is None:
        return None
    try:
        value = Fraction(answer)  # "51", "2.5", "-48" or the calculator's exact "7/2"
    except (ValueError, ZeroDivisionError):
        return None
    asked = f"'how many {thing}'"
    if value < 0:
        return f"{asked} is a count of {thing}, and {answer} is negative"
    words = set(re.findall(r"[a-z]+", question.lower()))
    measured = thing in _MEASURES or not words.isdisjoint(_FRACTIONAL)
    if not measured and value.denominator != 1:
        return f"{asked} asks for a whole number of {thing}, and {answer} is not one"
    return None


def with_count_finding(text: str, question: str, answer: str | None) -> str:
    """``text`` with the count check's finding after it, when there is one."""
    finding = count_finding(question, answer)
    return text if finding is None else f"{text}{_MARK}{finding})"


def whole_counts(text: str) -> ValidatorResult:
    """The validator of the demo step: fails a candidate whose member found its answer is no count
    of the things the question asks "how many" of (a negative or fractional count), naming it."""
    at = text.rfind(_MARK)
    finding = text[at + len(_MARK) : -1] if at >= 0 and text.endswith(")") else ""
    if _FINDING.fullmatch(finding):
        return ValidatorResult(COUNTS_CHECK, False, finding)
    return ValidatorResult(COUNTS_CHECK, True)
