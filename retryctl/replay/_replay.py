"""Replay a bank through a stopping rule, in the contract's random orders.

Contract: one ``random.Random(seed)`` for the whole run; for each order (outer loop) and each question
(inner loop) ``rng.sample(range(n), n)`` is that question's sample order. A rule sees samples in that
order until it stops or the cap (``max_samples``, the question's sample count, or a lower cap a decision
set) is reached; the answer is the leader at that point (most votes, first seen wins a tie).
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass

from retryctl._scores import auroc, ece
from retryctl.controller.stopping import RuleLike, StopDecision, StoppingRule, Tally, as_rule
from retryctl.exceptions import ConfigError
from retryctl.replay._bank import NO_ANSWER, CodedBank, CodedQuestion

__all__ = ["ReplayResult", "make_orders", "replay"]

Orders = list[list[list[int]]]
_Signature = tuple[tuple[int, ...], int, int]


@dataclass(frozen=True)
class ReplayResult:
    """What one policy did on one bank: totals and per-question figures (for strata and A/B tests)."""

    policy: str
    """The policy's name as asked for."""
    orders: int
    """How many random orders were replayed."""
    correct: tuple[int, ...]
    """Per question, in how many orders the answer matched the gold."""
    samples: tuple[int, ...]
    """Per question, samples drawn summed over the orders."""
    ece: float | None = None
    """ECE (equal-mass bins) of the rule's final confidence as P(the answer is right), over every
    (order, question); ``None`` without any."""
    auroc: float | None = None
    """AUROC of that confidence for correctness; ``None`` unless both right and wrong answers occur."""

    @property
    def questions(self) -> int:
        """How many questions the bank has."""
        return len(self.correct)

    def accuracy(self, indices: Sequence[int] | None = None) -> float:
        """Percent of (order, question) pairs answered correctly, over ``indices`` (default all)."""
        chosen = range(self.questions) if indices is None else indices
        pairs = len(chosen) * self.orders
        return 100.0 * sum(self.correct[i] for i in chosen) / pairs if pairs else 0.0

    def avg_samples(self, indices: Sequence[int] | None = None) -> float:
        """Mean samples per (order, question) pair, over ``indices`` (default all)."""
        chosen = range(self.questions) if indices is None else indices
        pairs = len(chosen) * self.orders
        return sum(self.samples[i] for i in chosen) / pairs if pairs else 0.0


def make_orders(bank: CodedBank, *, orders: int, seed: int) -> Orders:
    """``result[r][q]`` is question ``q``'s sample order in replay ``r`` (orders outer, questions inner)."""
    if orders < 1:
        raise ConfigError(field="orders", value=orders, problem="must be >= 1")
    rng = random.Random(seed)
    return [[rng.sample(range(q.n), q.n) for q in bank.questions] for _ in range(orders)]


# Decisions of an order-free rule by vote signature (sorted answer votes, unanswered, cap): many
# questions and orders share signatures, so most steps of a replay are a dict lookup.
_Memo = dict[_Signature, tuple[bool, int | None, float]]


def _run_one(
    question: CodedQuestion, perm: Sequence[int], rule: StoppingRule, cap: int, memo: _Memo | None
) -> tuple[int, int, float]:
    """Replay one question in one order; returns (answer code, samples drawn, the rule's last confidence)."""
    counts = [0] * len(question.keys)
    first_seen = [0] * len(question.keys)
    unanswered = 0
    keys = question.keys
    with_conf = question.has_confidences
    answers: list[str | None] = []
    confidences: list[float | None] = []
    n = 0
    confidence = 0.0
    while n < cap:
        index = perm[n]
        code = question.answers[index]
        n += 1
        if code == NO_ANSWER:
            unanswered += 1
            answers.append(None)
        else:
            if counts[code] == 0:
                first_seen[code] = n
            counts[code] += 1
            answers.append(keys[code])
        if with_conf:
            confidences.append(question.confidences[index])
        if memo is not None:
            signature = (tuple(sorted((c for c in counts if c), reverse=True)), unanswered, cap)
            cached = memo.get(signature)
            if cached is None:
                decision = rule(Tally(tuple(answers), (), cap))
                _check(decision, rule)
                cached = memo[signature] = (decision.stop, decision.max_samples, decision.confidence)
            stop, lower, confidence = cached
        else:
            decision = rule(Tally(tuple(answers), tuple(confidences), cap))
            _check(decision, rule)
            stop, lower, confidence = decision.stop, decision.max_samples, decision.confidence
        if lower is not None and lower < cap:
            cap = max(lower, 1)
        if stop:
            break
    best = NO_ANSWER
    for code, votes in enumerate(counts):
        if votes and (
            best == NO_ANSWER
            or votes > counts[best]
            or (votes == counts[best] and first_seen[code] < first_seen[best])
        ):
            best = code
    return best, n, confidence


def _check(decision: object, rule: StoppingRule) -> None:
    if not isinstance(decision, StopDecision):
        raise TypeError(f"rule {rule!r} returned {type(decision).__name__}, not StopDecision")


def replay(
    bank: CodedBank,
    rule: RuleLike,
    *,
    orders: Orders,
    max_samples: int = 40,
    policy: str | None = None,
) -> ReplayResult:
    """Replay every question of ``bank`` in every order of ``orders`` (from :func:`make_orders`).

    ``rule`` may be any rule or plain callable (adapted by :func:`as_rule`).
    """
    if max_samples < 1:
        raise ConfigError(field="max_samples", value=max_samples, problem="must be >= 1")
    rule = as_rule(rule)
    order_free = bool(getattr(rule, "order_free", False))
    memo: _Memo | None = {} if order_free else None
    correct = [0] * len(bank.questions)
    drawn = [0] * len(bank.questions)
    finals: list[tuple[float, bool]] = []
    for order in orders:
        for qi, (question, perm) in enumerate(zip(bank.questions, order, strict=True)):
            use_memo = memo if not question.has_confidences else None
            answer, n, confidence = _run_one(question, perm, rule, min(max_samples, question.n), use_memo)
            right = answer != NO_ANSWER and answer == question.gold
            correct[qi] += right
            drawn[qi] += n
            finals.append((min(1.0, max(0.0, confidence)), right))
    name = policy if policy is not None else getattr(rule, "name", repr(rule))
    return ReplayResult(
        policy=name,
        orders=len(orders),
        correct=tuple(correct),
        samples=tuple(drawn),
        ece=ece(finals),
        auroc=auroc(finals),
    )
