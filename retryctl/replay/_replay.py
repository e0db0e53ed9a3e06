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
from retryctl.controller.stopping import RuleLike, StopDecision, StoppingRule, Tally, as_rule, cut_point
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
    tokens: tuple[int, ...] | None = None
    """Per question, generated tokens spent summed over the orders (a cut sample's up to its cut);
    ``None`` when the bank does not give every sample's token count."""
    cut: int = 0
    """Samples cut short, over every (order, question)."""

    @property
    def questions(self) -> int:
        """How many questions the bank has."""
        return len(self.correct)

    def accuracy(self, indices: Sequence[int] | None = None) -> float:
        """Percent of (order, question) pairs answered correctly, over ``indices`` (default all)."""
        chosen = range(self.questions) if indices is None else indices
        pairs = len(chosen) * self.orders
        return 100.0 * sum(self.correct[i] for i in chosen) / pairs if pairs else 0.0

    def avg_tokens(self, indices: Sequence[int] | None = None) -> float | None:
        """Mean generated tokens per (order, question) pair, over ``indices``; ``None`` unknown."""
        if self.tokens is None:
            return None
        chosen = range(self.questions) if indices is None else indices
        pairs = len(chosen) * self.orders
        return sum(self.tokens[i] for i in chosen) / pairs if pairs else 0.0

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


@dataclass
class _Run:
    """One question replayed in one order."""

    answer: int
    """The answer code (``NO_ANSWER`` without any)."""
    drawn: int
    """Samples started, cut ones included."""
    tokens: int
    """Tokens generated, a cut sample's up to its cut."""
    confidence: float
    """The rule's last confidence."""
    cut: int
    """Samples cut short."""


def _cut_at(question: CodedQuestion, index: int, bound: float | None) -> int | None:
    logprobs = question.logprobs[index] if question.logprobs else None
    if bound is None or logprobs is None:
        return None
    return cut_point(logprobs, bound)


class _Counts:
    """Votes per answer code as a replay draws them, and who was seen first (ties go to them)."""

    def __init__(self, question: CodedQuestion) -> None:
        self.keys = question.keys
        self.votes = [0] * len(question.keys)
        self.first_seen = [0] * len(question.keys)
        self.unanswered = 0
        self.answers: list[str | None] = []

    def add(self, code: int, at: int) -> None:
        if code == NO_ANSWER:
            self.unanswered += 1
            self.answers.append(None)
            return
        if self.votes[code] == 0:
            self.first_seen[code] = at
        self.votes[code] += 1
        self.answers.append(self.keys[code])

    def signature(self, cap: int) -> _Signature:
        return (tuple(sorted((c for c in self.votes if c), reverse=True)), self.unanswered, cap)

    def answer(self, leader: str | None) -> int:
        """The rule's own leader where it names one, else most votes (first seen wins a tie)."""
        if leader is not None:
            return self.keys.index(leader)
        best = NO_ANSWER
        for code, votes in enumerate(self.votes):
            if votes and (
                best == NO_ANSWER
                or votes > self.votes[best]
                or (votes == self.votes[best] and self.first_seen[code] < self.first_seen[best])
            ):
                best = code
        return best


def _run_one(
    question: CodedQuestion, perm: Sequence[int], rule: StoppingRule, cap: int, memo: _Memo | None
) -> _Run:
    """Replay one question in one order: draw until the rule stops or the cap is reached.

    A rule with a ``cut_bound`` (from the complete samples' floors) cuts a sample whose recorded
    logprobs fall below it: its tokens up to the cut are spent, it gives no vote, and the rule's cap
    (the votes it may still see) shrinks by one.
    """
    counts = _Counts(question)
    with_conf = question.has_confidences
    bound_of = getattr(rule, "cut_bound", None) if with_conf else None
    confidences: list[float | None] = []
    floors: list[float | None] = []
    drawn = tokens = cut = 0
    confidence = 0.0
    leader: str | None = None
    while drawn < cap:
        index = perm[drawn]
        drawn += 1
        cut_at = _cut_at(question, index, bound_of(floors) if bound_of is not None else None)
        if cut_at is not None:
            tokens += cut_at
            cut += 1
            continue
        tokens += (question.tokens[index] or 0) if question.tokens else 0
        counts.add(question.answers[index], drawn)
        if with_conf:
            confidences.append(question.confidences[index])
            floors.append(question.floors[index] if question.floors else None)
        votes_cap = cap - cut
        if memo is not None:
            signature = counts.signature(votes_cap)
            cached = memo.get(signature)
            if cached is None:
                decision = rule(Tally(tuple(counts.answers), (), votes_cap))
                _check(decision, rule)
                cached = memo[signature] = (decision.stop, decision.max_samples, decision.confidence)
            stop, lower, confidence = cached
        else:
            decision = rule(Tally(tuple(counts.answers), tuple(confidences), votes_cap))
            _check(decision, rule)
            stop, lower, confidence = decision.stop, decision.max_samples, decision.confidence
            leader = decision.leader
        if lower is not None and lower < cap:
            cap = max(lower, 1)
        if stop:
            break
    return _Run(counts.answer(leader), drawn, tokens, confidence, cut)


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
    tokens = [0] * len(bank.questions)
    cut = 0
    finals: list[tuple[float, bool]] = []
    for order in orders:
        for qi, (question, perm) in enumerate(zip(bank.questions, order, strict=True)):
            use_memo = memo if not question.has_confidences else None
            run = _run_one(question, perm, rule, min(max_samples, question.n), use_memo)
            right = run.answer != NO_ANSWER and run.answer == question.gold
            correct[qi] += right
            drawn[qi] += run.drawn
            tokens[qi] += run.tokens
            cut += run.cut
            finals.append((min(1.0, max(0.0, run.confidence)), right))
    name = policy if policy is not None else getattr(rule, "name", repr(rule))
    return ReplayResult(
        policy=name,
        orders=len(orders),
        correct=tuple(correct),
        samples=tuple(drawn),
        ece=ece(finals),
        auroc=auroc(finals),
        tokens=tuple(tokens) if bank.has_tokens else None,
        cut=cut,
    )
