"""Sample banks: the one reader of the bank file format, shared by the replay backend and ``retryctl bench``.

A bank is JSON Lines, one question a line::

    {"id", "question", "gold", "samples": [{"text", "answer"?, "token_logprobs"?: [float]}]}

``id`` and ``gold`` may be strings or numbers, ``answer`` a string, a number or null. Blank lines are
skipped. Any malformed line, a non-UTF-8 line, a line longer than :data:`MAX_BANK_LINE_BYTES` or a
repeated id raises :class:`~retryctl.exceptions.BankFormatError` naming the file and the 1-based line.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from retryctl.exceptions import BankFormatError

__all__ = ["BankQuestion", "RecordedSample", "load_bank"]

MAX_BANK_LINE_BYTES = 64 << 20
"""A longer line is refused before it is read whole (real banks' lines are kilobytes: 40 samples with
token logprobs stay far below this)."""


@dataclass(frozen=True)
class RecordedSample:
    """One recorded model answer."""

    text: str
    """The answer's full text."""
    answer: str | None = None
    """The answer extracted when the bank was made, if recorded."""
    token_logprobs: tuple[float, ...] | None = None
    """Per-token logprobs, if recorded."""


@dataclass(frozen=True)
class BankQuestion:
    """A question of a bank with its gold answer and recorded samples."""

    id: str
    """Unique id within the bank."""
    question: str
    """The question text as it was asked."""
    gold: str
    """The reference answer."""
    samples: tuple[RecordedSample, ...]
    """Recorded samples in recording order."""


def _scalar_text(value: object) -> str | None:
    """An id, gold or answer may be a string or a finite number; anything else is a format error."""
    if isinstance(value, bool):
        return None
    if isinstance(value, str):
        return value
    if isinstance(value, int | float) and math.isfinite(value):
        return str(value)
    return None


def _logprobs(raw: object, where: str) -> tuple[float, ...]:
    if not isinstance(raw, list) or not all(
        isinstance(lp, int | float) and not isinstance(lp, bool) for lp in raw
    ):
        raise ValueError(f"{where}.token_logprobs must be a list of numbers")
    if not all(math.isfinite(lp) and lp <= 1e-6 for lp in raw):
        raise ValueError(f"{where}.token_logprobs must be finite log-probabilities (<= 0)")
    return tuple(float(lp) for lp in raw)


def _sample(raw: object, where: str) -> RecordedSample:
    if not isinstance(raw, dict):
        raise ValueError(f"{where} must be an object")
    text = raw.get("text")
    if not isinstance(text, str):
        raise ValueError(f"{where}.text must be a string")
    answer = raw.get("answer")
    answer_text = None if answer is None else _scalar_text(answer)
    if answer is not None and answer_text is None:
        raise ValueError(f"{where}.answer must be a string, a number or null")
    logprobs = raw.get("token_logprobs")
    return RecordedSample(
        text=text,
        answer=answer_text,
        token_logprobs=None if logprobs is None else _logprobs(logprobs, where),
    )


def _question(record: Any) -> BankQuestion:
    """Validate one parsed line; a ValueError carries the problem."""
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
    gold = _scalar_text(record["gold"])
    if gold is None:
        raise ValueError("field 'gold' must be a string or a number")
    samples = record["samples"]
    if not isinstance(samples, list):
        raise ValueError("field 'samples' must be a list")
    if not samples:
        raise ValueError("field 'samples' is empty")
    return BankQuestion(
        id=qid,
        question=record["question"],
        gold=gold,
        samples=tuple(_sample(s, f"samples[{i}]") for i, s in enumerate(samples)),
    )


def load_bank(path: str | Path) -> list[BankQuestion]:
    """Read and validate a bank. A missing file raises :class:`FileNotFoundError`; an empty bank (no
    question) is a format error at line 1."""
    name = str(path)
    questions: list[BankQuestion] = []
    seen: set[str] = set()
    with open(path, "rb") as handle:
        number = 0
        while raw := handle.readline(MAX_BANK_LINE_BYTES + 1):
            number += 1
            if len(raw) > MAX_BANK_LINE_BYTES:
                problem = f"line longer than {MAX_BANK_LINE_BYTES} bytes"
                raise BankFormatError(path=name, line=number, problem=problem)
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise BankFormatError(
                    path=name, line=number, problem=f"not UTF-8 text (byte {exc.start + 1})"
                ) from None
            if not line.strip():
                continue
            try:
                question = _question(json.loads(line))
            except json.JSONDecodeError as exc:
                problem = f"invalid JSON: {exc.msg} (column {exc.colno})"
                raise BankFormatError(path=name, line=number, problem=problem) from None
            except RecursionError:
                raise BankFormatError(
                    path=name, line=number, problem="invalid JSON: nested too deeply"
                ) from None
            except ValueError as exc:
                raise BankFormatError(path=name, line=number, problem=str(exc)) from None
            if question.id in seen:
                raise BankFormatError(path=name, line=number, problem=f"duplicate id {question.id!r}")
            seen.add(question.id)
            questions.append(question)
    if not questions:
        raise BankFormatError(path=name, line=1, problem="the bank has no questions")
    return questions
