"""Answer equivalence: when do two candidates say the same thing, and is an answer the gold one?

An :class:`AnswerEquivalence` first *extracts* the answer from a candidate's text (the first extractor
that finds one wins), then *normalises* it to a canonical key; two candidates agree when their keys are
equal. Any ``Callable[[str], str | None]`` can serve as extractor, normaliser, or the whole equivalence.

:func:`answers_agree` grades an answer against gold with the same normalisers, so that an audit's or
a batch's accuracy counts as right exactly what the controller's votes count as the same answer.

Public through :mod:`retryctl.controller`; a module of its own, outside that package, because the
audit grades with it and must not import the controller (``retryctl audit`` starts without pydantic).
Standard library only.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from fractions import Fraction

__all__ = [
    "AnswerEquivalence",
    "EquivalenceLike",
    "answers_agree",
    "as_equivalence",
    "default_equivalence",
    "extract_answer_is",
    "extract_boxed",
    "extract_last_line",
    "extract_last_number",
    "extract_stated_number",
    "normalise_number",
    "normalise_text",
    "number_equivalence",
]

Extractor = Callable[[str], str | None]
Normaliser = Callable[[str], str | None]
EquivalenceLike = Callable[[str], str | None]

_ANSWER_IS = re.compile(
    r"(?:final answer|the answer|answer)\s*(?:is|:|=)\s*(.+?)(?:\.\s|\.?$|\n)", re.IGNORECASE
)
_BOXED = re.compile(r"\\boxed\{([^{}]*)\}")
# A number as people write it: sign, thousands separators, decimals, exponent, or a fraction a/b.
_NUMBER = re.compile(r"[-+]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?:[eE][-+]?\d+)?(?:\s*/\s*\d+)?")
_QUOTES_AND_TRAILING = re.compile(r"^[\s\"'`*(\[]+|[\s\"'`*.,;:!?)\]]+$")
_SPACES = re.compile(r"\s+")


def extract_answer_is(text: str) -> str | None:
    """The last "the answer is X" (or "Answer: X", "final answer = X") in the text."""
    matches = _ANSWER_IS.findall(text)
    return matches[-1].strip() if matches else None


def extract_boxed(text: str) -> str | None:
    """The last LaTeX ``\\boxed{X}``."""
    matches = _BOXED.findall(text)
    return matches[-1].strip() if matches else None


def extract_last_number(text: str) -> str | None:
    """The last number written in the text."""
    matches = _NUMBER.findall(text)
    return matches[-1] if matches else None


def extract_stated_number(text: str) -> str | None:
    """The last number of the last "the answer is ...", else the last number of the text: a word
    problem's answer, whatever words surround it ("The answer is 15 flowers.")."""
    said = extract_answer_is(text)
    found = extract_last_number(said) if said else None
    return found or extract_last_number(text)


def extract_last_line(text: str) -> str | None:
    """The last non-empty line: a bare answer like ``42`` or ``yes``."""
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    return lines[-1] if lines else None


def normalise_number(answer: str) -> str | None:
    """``12``, ``12.0``, ``+12``, ``1,200/100`` all become ``12``; ``None`` if it is not one number."""
    candidate = answer.strip().rstrip(".").replace("$", "").replace("%", "")
    if not _NUMBER.fullmatch(candidate):
        return None
    candidate = candidate.replace(",", "").replace(" ", "")
    try:
        if "/" in candidate:
            num, den = candidate.split("/")
            value = Fraction(Decimal(num)) / Fraction(Decimal(den))
        else:
            value = Fraction(Decimal(candidate))
    except (InvalidOperation, ZeroDivisionError, ValueError):
        return None
    if value.denominator == 1:
        return str(value.numerator)
    # A terminating decimal prints as one (0.5); others stay exact rationals (1/3).
    as_decimal = Decimal(value.numerator) / Decimal(value.denominator)
    if Fraction(as_decimal) == value:
        return format(as_decimal.normalize(), "f")
    return f"{value.numerator}/{value.denominator}"


def normalise_text(answer: str) -> str | None:
    """Case-fold, collapse whitespace, drop surrounding quotes, brackets and final punctuation."""
    text = _QUOTES_AND_TRAILING.sub("", _SPACES.sub(" ", answer.casefold()))
    return text or None


@dataclass(frozen=True)
class AnswerEquivalence:
    """Extract with the first extractor that finds something, then normalise with the first normaliser
    that accepts it. Calling it returns the canonical key, or ``None`` when no answer was found."""

    extractors: Sequence[Extractor] = (extract_boxed, extract_answer_is, extract_last_line)
    normalisers: Sequence[Normaliser] = (normalise_number, normalise_text)

    def extract(self, text: str) -> str | None:
        for extractor in self.extractors:
            found = extractor(text)
            if found:
                return found
        return None

    def normalise(self, answer: str) -> str | None:
        for normaliser in self.normalisers:
            key = normaliser(answer)
            if key is not None:
                return key
        return None

    def __call__(self, text: str) -> str | None:
        answer = self.extract(text)
        return None if answer is None else self.normalise(answer)


default_equivalence = AnswerEquivalence()
"""Boxed → "the answer is" → last line; numbers compared as exact values, text case-insensitively."""

number_equivalence = AnswerEquivalence(
    extractors=(extract_boxed, extract_stated_number), normalisers=(normalise_number,)
)
"""Numbers only: boxed, else the number stated as the answer, else the last number; "10 crayons" and
"10" agree, and a text without a number has no answer."""


def as_equivalence(equivalence: EquivalenceLike | None) -> EquivalenceLike:
    """``None`` means :data:`default_equivalence`; any callable text → key is used as it is."""
    return default_equivalence if equivalence is None else equivalence


def answers_agree(answer: str, gold: str, equivalence: AnswerEquivalence = default_equivalence) -> bool:
    """Whether ``answer`` is ``gold``, compared as votes are: both normalised by ``equivalence``'s
    normalisers (numbers as numbers, ``12.0`` and ``1,200/100`` are ``12``; text case- and
    space-folded, final punctuation dropped). An answer or a gold that normalises to nothing agrees
    with nothing."""
    key = equivalence.normalise(answer)
    return key is not None and key == equivalence.normalise(gold)
