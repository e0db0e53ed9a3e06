"""Replay: a sample bank's recorded samples served as candidates, in a chosen order.

Banks are read by :func:`retryctl.banks.load_bank` (the format is documented there). The backend finds
the question from the last user message (its text, or its id), then hands out that
question's samples in the given order, k at a time, never one twice.
"""

from __future__ import annotations

import random
import threading
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from retryctl.banks import BankQuestion, RecordedSample, load_bank
from retryctl.exceptions import ConfigError
from retryctl.models._base import BackendBase, check_k
from retryctl.models._errors import ReplayExhausted
from retryctl.models._messages import MessagesLike, normalise_messages
from retryctl.models._types import Candidate, SamplingParams, TokenLogprob

__all__ = ["ReplayBackend", "random_order"]


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
