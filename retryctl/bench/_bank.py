"""Sample banks: JSONL, one question a line (format in DESIGN.md), loaded into int-coded answers.

Each line is ``{"id", "question", "gold", "samples": [{"text", "answer"?, "token_logprobs"?}]}``. A
sample's answer key is ``default_equivalence.normalise(answer)`` when ``answer`` is given, else
``default_equivalence(text)``; the gold is normalised the same way. A sample with token logprobs gets
the geometric-mean token probability, exp(mean logprob), as its confidence. Keys are coded as small
ints per question so a replay compares ints, not strings.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from retryctl.controller._equivalence import default_equivalence
from retryctl.exceptions import BankFormatError

__all__ = ["NO_ANSWER", "Bank", "BankQuestion", "load_bank"]

NO_ANSWER = -1
"""The code of a sample whose answer could not be extracted (and of a gold that normalises to nothing)."""


@dataclass(frozen=True)
class BankQuestion:
    """One question: its samples' answer codes, the gold's code, and the codes' canonical keys."""

    id: str
    """The bank's id of the question."""
    keys: tuple[str, ...]
    """Canonical answer keys; code ``i`` is ``keys[i]``."""
    answers: tuple[int, ...]
    """Each sample's answer code, ``NO_ANSWER`` where none was found."""
    confidences: tuple[float | None, ...]
    """Each sample's token confidence in [0, 1], ``None`` without logprobs."""
    gold: int
    """The gold's code, ``NO_ANSWER`` when no sample gave the gold (or it normalises to nothing)."""

    @property
    def n(self) -> int:
        """How many samples the bank holds for this question."""
        return len(self.answers)

    @property
    def has_confidences(self) -> bool:
        """Whether any sample carried token logprobs."""
        return any(c is not None for c in self.confidences)

    def key(self, code: int) -> str | None:
        """The canonical key of ``code`` (``None`` for ``NO_ANSWER``)."""
        return None if code == NO_ANSWER else self.keys[code]

    @property
    def leader_share(self) -> float:
        """Share of all samples that gave the most common answer: the question's difficulty signal."""
        counts: dict[int, int] = {}
        for code in self.answers:
            if code != NO_ANSWER:
                counts[code] = counts.get(code, 0) + 1
        return max(counts.values()) / self.n if counts else 0.0


@dataclass(frozen=True)
class Bank:
    """A loaded sample bank."""

    path: str
    """Where it was read from."""
    questions: tuple[BankQuestion, ...]
    """Its questions in file order."""

    @property
    def has_confidences(self) -> bool:
        """Whether any sample of any question carried token logprobs."""
        return any(q.has_confidences for q in self.questions)


def _fail(path: str, line: int, problem: str) -> BankFormatError:
    return BankFormatError(path=path, line=line, problem=problem)


def _scalar_text(value: object) -> str | None:
    """A gold or answer may be a string or a number; anything else is a format error (None)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, str):
        return value
    if isinstance(value, int | float) and math.isfinite(value):
        return str(value)
    return None


def _confidence(logprobs: object, where: str) -> float | None:
    if not isinstance(logprobs, list) or not all(
        isinstance(lp, int | float) and not isinstance(lp, bool) for lp in logprobs
    ):
        raise ValueError(f"{where}.token_logprobs must be a list of numbers")
    if not logprobs:
        return None
    if not all(math.isfinite(lp) and lp <= 1e-6 for lp in logprobs):
        raise ValueError(f"{where}.token_logprobs must be finite log-probabilities (<= 0)")
    return min(1.0, math.exp(sum(logprobs) / len(logprobs)))


def _question(record: Any) -> BankQuestion:
    """Validate one parsed line; ValueError carries the problem."""
    if not isinstance(record, dict):
        raise ValueError(f"a line must be a JSON object, got {type(record).__name__}")
    for name in ("id", "question", "gold", "samples"):
        if name not in record:
            raise ValueError(f"missing field {name!r}")
    qid = _scalar_text(record["id"])
    if qid is None:
        raise ValueError("field 'id' must be a string or a number")
    if not isinstance(record["question"], str):
        raise ValueError("field 'question' must be a string")
    gold_text = _scalar_text(record["gold"])
    if gold_text is None:
        raise ValueError("field 'gold' must be a string or a number")
    samples = record["samples"]
    if not isinstance(samples, list):
        raise ValueError("field 'samples' must be a list")
    if not samples:
        raise ValueError("field 'samples' is empty")
    codes: dict[str, int] = {}
    answers: list[int] = []
    confidences: list[float | None] = []
    for i, sample in enumerate(samples):
        where = f"samples[{i}]"
        if not isinstance(sample, dict):
            raise ValueError(f"{where} must be an object")
        text = sample.get("text")
        if not isinstance(text, str):
            raise ValueError(f"{where}.text must be a string")
        raw = sample.get("answer")
        if raw is None:
            key = default_equivalence(text)
        else:
            answer_text = _scalar_text(raw)
            if answer_text is None:
                raise ValueError(f"{where}.answer must be a string, a number or null")
            key = default_equivalence.normalise(answer_text)
        answers.append(NO_ANSWER if key is None else codes.setdefault(key, len(codes)))
        logprobs = sample.get("token_logprobs")
        confidences.append(None if logprobs is None else _confidence(logprobs, where))
    gold_key = default_equivalence.normalise(gold_text)
    gold = codes.get(gold_key, NO_ANSWER) if gold_key is not None else NO_ANSWER
    return BankQuestion(
        id=qid,
        keys=tuple(codes),
        answers=tuple(answers),
        confidences=tuple(confidences),
        gold=gold,
    )


def load_bank(path: str | Path) -> Bank:
    """Read and validate a bank; a malformed line raises :class:`BankFormatError` naming it (1-based).

    Blank lines are skipped. A missing file raises :class:`FileNotFoundError`; an empty bank (no
    question) is a format error at line 1.
    """
    name = str(path)
    questions: list[BankQuestion] = []
    with open(path, "rb") as handle:
        for number, raw in enumerate(handle, start=1):
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise _fail(name, number, f"not UTF-8 text (byte {exc.start + 1})") from None
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as exc:
                raise _fail(name, number, f"invalid JSON: {exc.msg} (column {exc.colno})") from None
            try:
                questions.append(_question(record))
            except ValueError as exc:
                raise _fail(name, number, str(exc)) from None
    if not questions:
        raise _fail(name, 1, "the bank has no questions")
    return Bank(path=name, questions=tuple(questions))
