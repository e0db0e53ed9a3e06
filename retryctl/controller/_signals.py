"""Named confidence signals in [0, 1] and their fusion into one confidence that keeps every part visible.

A signal is measured, not assumed: when a source is unavailable (no logprobs, a verifier that raised or
timed out) the signal is marked unavailable with a note, its weight drops to zero, and the remaining weights
are renormalised. The verdict's evidence then shows what was used and what was not.
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

__all__ = [
    "Fusion",
    "Signal",
    "ValidatorResult",
    "agreement",
    "cross_member",
    "fuse",
    "token_confidence",
    "validators_signal",
    "weakest_span",
]

Verifier = Callable[[str], float]
AsyncVerifier = Callable[[str], Awaitable[float]]


@dataclass(frozen=True)
class Signal:
    """One named measurement in [0, 1]. ``available=False`` means it could not be measured (see ``note``)."""

    name: str
    value: float
    available: bool = True
    note: str = ""

    def __post_init__(self) -> None:
        if not (0.0 <= self.value <= 1.0) or math.isnan(self.value):
            raise ValueError(f"signal {self.name!r} value {self.value!r} is outside [0, 1]")

    @classmethod
    def unavailable(cls, name: str, note: str) -> Signal:
        return cls(name=name, value=0.0, available=False, note=note)


def _probability(logprobs: Sequence[float]) -> float:
    mean = math.fsum(logprobs) / len(logprobs)
    return min(1.0, math.exp(min(0.0, mean)))


def token_confidence(logprobs: Sequence[float] | None) -> Signal:
    """Geometric-mean token probability of a candidate (``exp`` of the mean logprob)."""
    if not logprobs:
        return Signal.unavailable("token_confidence", "no token logprobs from the backend")
    return Signal("token_confidence", _probability(logprobs))


def weakest_span(logprobs: Sequence[float] | None, window: int = 8) -> Signal:
    """The lowest geometric-mean probability over any ``window`` consecutive tokens.

    A long answer with one guessed number hides it in the overall mean; the weakest span shows it.
    """
    if window < 1:
        raise ValueError(f"window={window!r}: must be at least 1")
    if not logprobs:
        return Signal.unavailable("weakest_span", "no token logprobs from the backend")
    if len(logprobs) <= window:
        return Signal("weakest_span", _probability(logprobs))
    # Sliding sum: one pass instead of len × window.
    total = math.fsum(logprobs[:window])
    lowest = total
    for i in range(window, len(logprobs)):
        total += logprobs[i] - logprobs[i - window]
        lowest = min(lowest, total)
    return Signal("weakest_span", min(1.0, math.exp(min(0.0, lowest / window))))


def agreement(answers: Sequence[str | None]) -> Signal:
    """Share of candidates whose canonical answer equals the most common one.

    Candidates without an extractable answer count against agreement: a model that cannot produce an
    answer is not agreeing with anything.
    """
    if not answers:
        return Signal.unavailable("agreement", "no candidates")
    counts: dict[str, int] = {}
    for answer in answers:
        if answer is not None:
            counts[answer] = counts.get(answer, 0) + 1
    if not counts:
        return Signal("agreement", 0.0, note="no candidate had an extractable answer")
    return Signal("agreement", max(counts.values()) / len(answers))


def cross_member(leader: str | None, others: Mapping[str, Mapping[str, int]]) -> Signal:
    """How far *other* members of the group agree with ``leader``: of the members that voted before
    (``others``: member -> answer -> votes), the best share of one member's votes for ``leader``.

    A member agreeing with itself may be repeating one mistake (a model translating a question the
    same wrong way each time); another member reaching the same answer another way is evidence that
    repetition is not. Unavailable until another member has voted.
    """
    voted = {m: v for m, v in others.items() if sum(v.values()) > 0}
    if not voted:
        return Signal.unavailable("cross_member", "no other member of the group has answered")
    if leader is None:
        return Signal("cross_member", 0.0, note="no answer to compare")
    best, share = max(((m, v.get(leader, 0) / sum(v.values())) for m, v in voted.items()), key=lambda x: x[1])
    note = f"{best} gave it {share:.0%} of its votes" if share > 0 else "no other member gave this answer"
    return Signal("cross_member", share, note=note)


@dataclass(frozen=True)
class ValidatorResult:
    """One check of a candidate or tool result: its name, whether it passed, and the evidence."""

    name: str
    passed: bool
    evidence: str = ""
    check: bool = True
    """``False`` for what a driver states of every call rather than checks of its result (the tool
    node's ``call_succeeded``: the tool returned): it gates as any result does, but a verdict that rests
    on no other evidence is unchecked (``Verdict.checked``) and claims no confidence."""


def validators_signal(results: Sequence[ValidatorResult]) -> Signal:
    """Share of validators that passed; unavailable when there are none."""
    if not results:
        return Signal.unavailable("validators", "no validators configured")
    passed = sum(r.passed for r in results)
    failed = [r.name for r in results if not r.passed]
    note = f"failed: {', '.join(failed)}" if failed else ""
    return Signal("validators", passed / len(results), note=note)


DEFAULT_WEIGHTS: Mapping[str, float] = {
    "agreement": 0.5,
    "verifier": 0.3,
    # Measured only after a switch (another member's votes for the answer) and shown, but not weighted
    # by default: a member the step left for being unsure is noise to most groups. A group whose
    # members reach answers by different routes (the demo's model, calculator and python) weights it.
    "cross_member": 0.0,
    "token_confidence": 0.2,
    "weakest_span": 0.1,  # the least sure stretch of the best candidate's tokens
    "validators": 0.0,  # validators gate (a failure means refine); they do not dilute confidence
}


@dataclass(frozen=True)
class Fusion:
    """A fused confidence with every component: the signals, the weights actually used, and notes."""

    confidence: float
    signals: dict[str, float]
    weights: dict[str, float]
    notes: list[str] = field(default_factory=list)


def fuse(signals: Iterable[Signal], weights: Mapping[str, float] | None = None) -> Fusion:
    """Weighted mean of the available signals, renormalised over what was measured.

    Signals without a weight are reported but carry none. With nothing measurable the confidence is 0.
    """
    table = DEFAULT_WEIGHTS if weights is None else weights
    values: dict[str, float] = {}
    used: dict[str, float] = {}
    notes: list[str] = []
    for signal in signals:
        if not signal.available:
            used[signal.name] = 0.0
            if table.get(signal.name, 0.0) > 0:
                notes.append(f"{signal.name} unavailable ({signal.note}); fused without it")
            continue
        values[signal.name] = signal.value
        used[signal.name] = table.get(signal.name, 0.0)
        if signal.note:
            notes.append(f"{signal.name}: {signal.note}")
    total = math.fsum(used.values())
    if total <= 0:
        return Fusion(0.0, values, used, [*notes, "no weighted signal was available"])
    weights_used = {name: w / total for name, w in used.items()}
    confidence = math.fsum(values.get(name, 0.0) * w for name, w in weights_used.items())
    return Fusion(min(1.0, max(0.0, confidence)), values, weights_used, notes)
