"""Sample banks: the one reader of the bank file format, shared by the replay backend and ``retryctl bench``.

A bank is JSON Lines, one question a line::

    {"id", "question", "gold", "samples": [{"text", "answer"?, "token_logprobs"?: [float],
                                            "top_logprobs"?: [[[token, float]]], "tokens"?: int,
                                            "finish_reason"?: str, "latency_ms"?: float}]}

``id`` and ``gold`` may be strings or numbers, ``answer`` a string, a number or null. ``tokens`` is the
sample's generated token count (``len(token_logprobs)`` when those are given); ``top_logprobs`` holds,
per token, the most likely alternatives with their logprobs; ``stages`` (a staged sample's, in the
order they ran) holds per stage ``{"name", "tokens", "finish_reason", "chars"?, "prompt_tokens"?}``,
``chars`` being the length of the stage's part of ``text`` (the parts follow each other).
``retryctl record`` writes them all and keys of its own (``model``, ``sampling``, ``stratum``; a
sample's ``seed``), which readers may ignore. Blank lines are skipped. Any malformed line, a
non-UTF-8 line, a line longer than :data:`MAX_BANK_LINE_BYTES` or a repeated id raises
:class:`~retryctl.exceptions.BankFormatError` naming the file and the 1-based line.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from retryctl.exceptions import BankFormatError

__all__ = ["BankQuestion", "RecordedSample", "RecordedStage", "load_bank"]

MAX_BANK_LINE_BYTES = 64 << 20
"""A longer line is refused before it is read whole (real banks' lines are kilobytes: 40 samples with
token logprobs stay far below this)."""


@dataclass(frozen=True)
class RecordedStage:
    """One stage of a staged sample, as recorded."""

    name: str
    """The stage's name (``think``, ``answer``, ...)."""
    tokens: int
    """Tokens the stage generated."""
    finish_reason: str | None = None
    """Why the stage ended (``stop``, ``length``: its cap, ``cut``), if recorded."""
    chars: int | None = None
    """Length of the stage's part of the sample's text, if recorded."""
    prompt_tokens: int | None = None
    """Prompt tokens the stage's request (re-)evaluated, where the backend said."""


@dataclass(frozen=True)
class RecordedSample:
    """One recorded model answer."""

    text: str
    """The answer's full text."""
    answer: str | None = None
    """The answer extracted when the bank was made, if recorded."""
    token_logprobs: tuple[float, ...] | None = None
    """Per-token logprobs, if recorded."""
    tokens: int | None = None
    """Generated tokens, if recorded (else ``len(token_logprobs)`` where those are)."""
    finish_reason: str | None = None
    """Why decoding ended (``stop``, ``length``), if recorded."""
    latency_ms: float | None = None
    """Wall time of the call that produced it, if recorded."""
    stages: tuple[RecordedStage, ...] = ()
    """Its stages in the order they ran, for a staged sample (none for one drawn in one request, and
    for banks recorded before stages existed)."""

    def stage_texts(self) -> tuple[str, ...] | None:
        """Each stage's part of :attr:`text`, in order; ``None`` unless every stage's ``chars`` is known."""
        if not self.stages or any(s.chars is None for s in self.stages):
            return None
        parts, at = [], 0
        for stage in self.stages:
            end = at + (stage.chars or 0)
            parts.append(self.text[at:end])
            at = end
        return tuple(parts)

    @property
    def token_count(self) -> int | None:
        """Generated tokens: the recorded count, else how many logprobs were recorded, else ``None``."""
        if self.tokens is not None:
            return self.tokens
        return None if self.token_logprobs is None else len(self.token_logprobs)


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
    stratum: str | None = None
    """The question's difficulty stratum when the bank names one (its ``stratum`` key, as ``retryctl
    record`` copies it from the task file); ``retryctl bench --strata`` splits by it."""


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
    tokens = raw.get("tokens")
    if tokens is not None and (isinstance(tokens, bool) or not isinstance(tokens, int) or tokens < 0):
        raise ValueError(f"{where}.tokens must be a whole number >= 0")
    finish = raw.get("finish_reason")
    if finish is not None and not isinstance(finish, str):
        raise ValueError(f"{where}.finish_reason must be a string or null")
    latency = raw.get("latency_ms")
    if latency is not None and (
        isinstance(latency, bool) or not isinstance(latency, int | float) or not latency >= 0
    ):
        raise ValueError(f"{where}.latency_ms must be a number >= 0")
    top = raw.get("top_logprobs")
    if top is not None:
        _check_top(top, where)
    stages = raw.get("stages")
    if stages is not None and not isinstance(stages, list):
        raise ValueError(f"{where}.stages must be a list of objects")
    return RecordedSample(
        text=text,
        answer=answer_text,
        token_logprobs=None if logprobs is None else _logprobs(logprobs, where),
        tokens=tokens,
        finish_reason=finish,
        latency_ms=None if latency is None else float(latency),
        stages=tuple(_stage(s, f"{where}.stages[{i}]") for i, s in enumerate(stages or ())),
    )


def _count(raw: dict[str, Any], key: str, where: str, *, required: bool = False) -> int | None:
    value = raw.get(key)
    if value is None and not required:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{where}.{key} must be a whole number >= 0")
    return value


def _stage(raw: object, where: str) -> RecordedStage:
    if not isinstance(raw, dict):
        raise ValueError(f"{where} must be an object")
    name = raw.get("name")
    if not isinstance(name, str) or not name:
        raise ValueError(f"{where}.name must be a non-empty string")
    finish = raw.get("finish_reason")
    if finish is not None and not isinstance(finish, str):
        raise ValueError(f"{where}.finish_reason must be a string or null")
    return RecordedStage(
        name=name,
        tokens=_count(raw, "tokens", where, required=True) or 0,
        finish_reason=finish,
        chars=_count(raw, "chars", where),
        prompt_tokens=_count(raw, "prompt_tokens", where),
    )


def _check_top(raw: object, where: str) -> None:
    """``top_logprobs``: per token, a list of ``[token, logprob]`` pairs (kept in the file, checked here)."""
    problem = f"{where}.top_logprobs must be a list, per token, of [token, logprob] pairs"
    if not isinstance(raw, list):
        raise ValueError(problem)
    for alternatives in raw:
        if not isinstance(alternatives, list):
            raise ValueError(problem)
        for pair in alternatives:
            if not (
                isinstance(pair, list)
                and len(pair) == 2
                and isinstance(pair[0], str)
                and isinstance(pair[1], int | float)
                and not isinstance(pair[1], bool)
                and math.isfinite(pair[1])
            ):
                raise ValueError(problem)


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
    stratum = record.get("stratum")
    if stratum is not None and not isinstance(stratum, str):
        raise ValueError(f"field 'stratum' must be a string, got {stratum!r}")
    return BankQuestion(
        id=qid,
        question=record["question"],
        gold=gold,
        samples=tuple(_sample(s, f"samples[{i}]") for i, s in enumerate(samples)),
        stratum=stratum,
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
