"""Converting between the JSON-plain state and the controller's data (Observation and its parts).

The state keeps only JSON values so any checkpointer can store it; these helpers rebuild the frozen
controller objects that :func:`~retryctl.controller.decide` takes.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

from retryctl.controller import (
    Classification,
    ErrorClass,
    Exhaustion,
    Signal,
    StopDecision,
    Tally,
    ValidatorResult,
)
from retryctl.controller._engine import run_check
from retryctl.nodes._state import CandidateRecord

__all__ = [
    "Validator",
    "best_candidate",
    "classification_from",
    "classification_to",
    "exhaustion_from",
    "exhaustion_to",
    "leader_token_confidence",
    "leader_weakest_span",
    "run_validators",
    "signal_from",
    "signal_to",
    "stop_from",
    "stop_to",
    "tally_of",
]

Validator = Callable[[str], "ValidatorResult | bool"]
"""A check of a candidate's text (or a tool's result): a :class:`ValidatorResult`, or a bool."""


def classification_to(c: Classification | None) -> dict[str, Any] | None:
    """A classification as JSON."""
    if c is None:
        return None
    return {**dataclasses.asdict(c), "error_class": c.error_class.value}


def classification_from(d: dict[str, Any] | None) -> Classification | None:
    """The inverse of :func:`classification_to`."""
    if d is None:
        return None
    return Classification(**{**d, "error_class": ErrorClass(d["error_class"])})


def exhaustion_to(e: Exhaustion | None) -> dict[str, Any] | None:
    """An exhaustion as JSON."""
    return None if e is None else dataclasses.asdict(e)


def exhaustion_from(d: dict[str, Any] | None) -> Exhaustion | None:
    """The inverse of :func:`exhaustion_to`."""
    return None if d is None else Exhaustion(**d)


def stop_to(s: StopDecision | None) -> dict[str, Any] | None:
    """A stopping decision as JSON (``leader`` only where the rule named one)."""
    if s is None:
        return None
    out = dataclasses.asdict(s)
    if out.get("leader") is None:
        out.pop("leader", None)
    return out


def stop_from(d: dict[str, Any] | None) -> StopDecision | None:
    """The inverse of :func:`stop_to`."""
    return None if d is None else StopDecision(**d)


def signal_to(s: Signal) -> dict[str, Any]:
    """A signal as JSON."""
    return dataclasses.asdict(s)


def signal_from(d: dict[str, Any]) -> Signal:
    """The inverse of :func:`signal_to`."""
    return Signal(**d)


def tally_of(candidates: Sequence[CandidateRecord], max_samples: int) -> Tally | None:
    """The tally of an attempt's votes (its candidates but the repeats and those cut short), ``None``
    without any."""
    votes = [c for c in candidates if not c.get("repeat") and not c.get("cut")]
    if not votes:
        return None
    confidences = [c["token_confidence"] for c in votes]
    usable = confidences if all(c is not None for c in confidences) else None
    return Tally.of([c["answer"] for c in votes], usable, max_samples=max_samples)


def best_candidate(
    candidates: Sequence[CandidateRecord], leader: str | None = None
) -> CandidateRecord | None:
    """The first candidate voting for the leading answer (or the first candidate if none answered).

    ``leader`` is the answer the stopping rule stood behind where it weighs votes
    (:attr:`StopDecision.leader`); ``None``: the answer with the most votes.
    """
    tally = tally_of(candidates, max(1, len(candidates)))
    if tally is None:
        return None
    chosen = leader if leader is not None else tally.leader
    return next((c for c in candidates if c["answer"] == chosen), candidates[0])


def leader_token_confidence(candidates: Sequence[CandidateRecord], leader: str | None = None) -> Signal:
    """Mean token confidence of the candidates voting for the leader; unavailable without logprobs."""
    best = best_candidate(candidates, leader)
    if best is None:
        return Signal.unavailable("token_confidence", "no candidates")
    voters = [
        c["token_confidence"] for c in candidates if c["answer"] == best["answer"] and not c.get("repeat")
    ]
    known = [v for v in voters if v is not None]
    if not known:
        return Signal.unavailable("token_confidence", "no token logprobs from the backend")
    return Signal("token_confidence", sum(known) / len(known))


def leader_weakest_span(candidates: Sequence[CandidateRecord], leader: str | None = None) -> Signal:
    """The weakest span of the best candidate's tokens; unavailable without logprobs."""
    best = best_candidate(candidates, leader)
    span = best.get("weakest_span") if best is not None else None
    if span is None:
        return Signal.unavailable("weakest_span", "no token logprobs from the backend")
    return Signal("weakest_span", span)


def run_validators(validators: Sequence[Validator], text: str) -> list[ValidatorResult]:
    """Run each validator on ``text``; one that raises fails with the error's type and message.

    The message goes to the model as refine feedback, so only the exception's one-line summary is
    kept: never a stack trace.
    """
    return [run_check(validator, text) for validator in validators]
