"""Replay: a sample bank's recorded samples served as candidates, in a chosen order.

A bank is JSON Lines, one question a line (DESIGN.md, "Sample banks"):
``{"id", "question", "gold", "samples": [{"text", "answer"?, "token_logprobs"?: [float]}]}``.
The backend finds the question from the last user message (its text, or its id), then hands out that
question's samples in the given order, k at a time, never one twice.
"""

from __future__ import annotations

import json
import random
import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from retryctl.exceptions import BankFormatError, ConfigError
from retryctl.models._base import BackendBase, check_k
from retryctl.models._errors import ReplayExhausted
from retryctl.models._messages import MessagesLike, normalise_messages
from retryctl.models._types import Candidate, SamplingParams, TokenLogprob

__all__ = ["BankQuestion", "RecordedSample", "ReplayBackend", "load_bank", "random_order"]


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
    gold: str | None
    """The reference answer."""
    samples: tuple[RecordedSample, ...]
    """Recorded samples in recording order."""


def _sample(raw: Any, where: str) -> RecordedSample:
    if not isinstance(raw, dict) or not isinstance(raw.get("text"), str):
        raise ValueError(f"{where}: a sample must be an object with a string 'text'")
    logprobs = raw.get("token_logprobs")
    if logprobs is not None and (
        not isinstance(logprobs, list)
        or not all(isinstance(x, int | float) and not isinstance(x, bool) for x in logprobs)
    ):
        raise ValueError(f"{where}: 'token_logprobs' must be a list of numbers")
    answer = raw.get("answer")
    return RecordedSample(
        text=raw["text"],
        answer=None if answer is None else str(answer),
        token_logprobs=None if logprobs is None else tuple(float(x) for x in logprobs),
    )


def _question(raw: Any) -> BankQuestion:
    if not isinstance(raw, dict):
        raise ValueError("a line must be a JSON object")
    for key in ("id", "question"):
        if not isinstance(raw.get(key), str | int) or isinstance(raw.get(key), bool):
            raise ValueError(f"'{key}' is missing or not a string")
    samples = raw.get("samples")
    if not isinstance(samples, list) or not samples:
        raise ValueError("'samples' must be a non-empty list")
    gold = raw.get("gold")
    return BankQuestion(
        id=str(raw["id"]),
        question=str(raw["question"]),
        gold=None if gold is None else str(gold),
        samples=tuple(_sample(s, f"samples[{i}]") for i, s in enumerate(samples)),
    )


def load_bank(path: str | Path) -> list[BankQuestion]:
    """Read a bank file; :class:`~retryctl.exceptions.BankFormatError` names the first bad line."""
    questions: list[BankQuestion] = []
    seen: set[str] = set()
    with Path(path).open(encoding="utf-8") as lines:
        for number, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            try:
                question = _question(json.loads(line))
            except (json.JSONDecodeError, ValueError) as exc:
                raise BankFormatError(path=str(path), line=number, problem=str(exc)) from exc
            if question.id in seen:
                raise BankFormatError(path=str(path), line=number, problem=f"duplicate id {question.id!r}")
            seen.add(question.id)
            questions.append(question)
    return questions


def random_order(question: BankQuestion, rng: random.Random) -> list[int]:
    """One random order of a question's samples, drawn as DESIGN.md's bench does."""
    n = len(question.samples)
    return rng.sample(range(n), n)


class ReplayBackend(BackendBase):
    """Serves recorded samples as candidates.

    ``orders`` maps a question id to the sample indices to serve, in order (default: as recorded). A
    question is found by the last user message's text (or id); ask for more samples than remain and
    :class:`~retryctl.models.ReplayExhausted` says how many are left.
    """

    def __init__(
        self,
        questions: Iterable[BankQuestion],
        *,
        orders: Mapping[str, Sequence[int]] | None = None,
        model: str = "bank",
    ) -> None:
        super().__init__()
        self._questions = {q.id: q for q in questions}
        self._by_text = {q.question.strip(): q.id for q in self._questions.values()}
        self._orders: dict[str, list[int]] = {}
        for qid, order in (orders or {}).items():
            self._check_order(qid, order)
            self._orders[qid] = list(order)
        self._model = model
        self._served: dict[str, int] = {}
        self._lock = threading.Lock()

    def _check_order(self, qid: str, order: Sequence[int]) -> None:
        question = self._questions.get(qid)
        if question is None:
            raise ConfigError(field="orders", value=qid, problem="no such question id")
        n = len(question.samples)
        if any(not 0 <= i < n for i in order) or len(set(order)) != len(order):
            raise ConfigError(
                field=f"orders[{qid}]",
                value=list(order),
                problem=f"must be distinct indices in [0, {n})",
            )

    @classmethod
    def from_file(cls, path: str | Path, **kwargs: Any) -> ReplayBackend:
        """A replay backend over a bank file."""
        return cls(load_bank(path), **kwargs)

    @property
    def name(self) -> str:
        return f"replay:{self._model}"

    def question_id(self, messages: MessagesLike) -> str:
        """The id of the question the conversation asks (its last user message)."""
        users = [m for m in normalise_messages(messages) if m["role"] == "user"]
        text = (users[-1]["content"] or "").strip() if users else ""
        qid = self._by_text.get(text, text if text in self._questions else None)
        if qid is None:
            raise ConfigError(field="messages", value=text[:80], problem="matches no question of the bank")
        return qid

    def reset(self) -> None:
        """Start every question's order from the beginning again."""
        with self._lock:
            self._served.clear()

    def _candidate(self, sample: RecordedSample) -> Candidate:
        logprobs = (
            None
            if sample.token_logprobs is None
            else tuple(TokenLogprob(token="", logprob=lp) for lp in sample.token_logprobs)
        )
        return Candidate(
            text=sample.text,
            model=self.name,
            logprobs=logprobs,
            finish_reason="stop",
            answer=sample.answer,
        )

    async def sample(
        self, messages: MessagesLike, params: SamplingParams | None = None, *, k: int = 1
    ) -> list[Candidate]:
        """The question's next k recorded samples (``params`` is ignored: the samples are fixed)."""
        check_k(k)
        qid = self.question_id(messages)
        question = self._questions[qid]
        order = self._orders.get(qid) or list(range(len(question.samples)))
        with self._lock:
            start = self._served.get(qid, 0)
            if start + k > len(order):
                raise ReplayExhausted(
                    f"question {qid!r}: asked for {k} more samples, {len(order) - start} left",
                    backend=self.name,
                )
            self._served[qid] = start + k
        return [self._candidate(question.samples[i]) for i in order[start : start + k]]
