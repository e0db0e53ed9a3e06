"""Sample banks coded for fast replay (the file format and its validation are in :mod:`retryctl.banks`).

A sample's answer key is ``default_equivalence.normalise(answer)`` when ``answer`` is given, else
``default_equivalence(text)``; the gold is normalised the same way. A sample with token logprobs gets
the geometric-mean token probability, exp(mean logprob), as its confidence. Keys are coded as small
ints per question so a replay compares ints, not strings.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from retryctl import banks
from retryctl._answers import default_equivalence
from retryctl.controller._signals import token_confidence
from retryctl.controller.stopping import group_floor

__all__ = ["NO_ANSWER", "CodedBank", "CodedQuestion", "code_bank"]

NO_ANSWER = -1
"""The code of a sample whose answer could not be extracted (and of a gold that normalises to nothing)."""


@dataclass(frozen=True)
class CodedQuestion:
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
    logprobs: tuple[tuple[float, ...] | None, ...] = ()
    """Each sample's token logprobs (``None`` where not recorded): what a cut-short replay reads."""
    tokens: tuple[int | None, ...] = ()
    """Each sample's generated tokens (``None`` where the bank does not say)."""
    floors: tuple[float | None, ...] = ()
    """Each sample's lowest group confidence (:func:`~retryctl.controller.stopping.group_floor`)."""
    stratum: str | None = None
    """The bank's own difficulty stratum of the question, when it names one."""

    @property
    def n(self) -> int:
        """How many samples the bank holds for this question."""
        return len(self.answers)

    @property
    def has_confidences(self) -> bool:
        """Whether any sample carried token logprobs."""
        return any(c is not None for c in self.confidences)

    @property
    def has_tokens(self) -> bool:
        """Whether every sample's token count is known."""
        return bool(self.tokens) and all(t is not None for t in self.tokens)

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
class CodedBank:
    """A loaded sample bank."""

    path: str
    """Where it was read from."""
    questions: tuple[CodedQuestion, ...]
    """Its questions in file order."""

    @property
    def has_confidences(self) -> bool:
        """Whether any sample of any question carried token logprobs."""
        return any(q.has_confidences for q in self.questions)

    @property
    def has_tokens(self) -> bool:
        """Whether every sample of every question has a known token count (``avg_tokens`` needs it)."""
        return all(q.has_tokens for q in self.questions)


def _encode(question: banks.BankQuestion) -> CodedQuestion:
    """Code a question's answers as small ints through answer equivalence."""
    codes: dict[str, int] = {}
    answers: list[int] = []
    confidences: list[float | None] = []
    floors: list[float | None] = []
    for sample in question.samples:
        if sample.answer is None:
            key = default_equivalence(sample.text)
        else:
            key = default_equivalence.normalise(sample.answer)
        answers.append(NO_ANSWER if key is None else codes.setdefault(key, len(codes)))
        # The live path's own measure (math.fsum): a replay must decide as a live run would at a
        # threshold, to the last bit.
        signal = token_confidence(sample.token_logprobs)
        confidences.append(signal.value if signal.available else None)
        floors.append(group_floor(sample.token_logprobs) if sample.token_logprobs else None)
    gold_key = default_equivalence.normalise(question.gold)
    gold = codes.get(gold_key, NO_ANSWER) if gold_key is not None else NO_ANSWER
    return CodedQuestion(
        id=question.id,
        keys=tuple(codes),
        answers=tuple(answers),
        confidences=tuple(confidences),
        gold=gold,
        logprobs=tuple(s.token_logprobs for s in question.samples),
        tokens=tuple(s.token_count for s in question.samples),
        floors=tuple(floors),
        stratum=question.stratum,
    )


def code_bank(path: str | Path) -> CodedBank:
    """Read and validate a bank (:func:`retryctl.banks.load_bank`), then code its answers."""
    return CodedBank(path=str(path), questions=tuple(_encode(q) for q in banks.load_bank(path)))
