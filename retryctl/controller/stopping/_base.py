"""The stopping-rule contract: a rule looks at the samples so far and says whether to stop, and why.

Rules are small callables combinable with ``&`` (stop only when both say stop) and ``|`` (stop when
either does), like tenacity's ``stop_all``/``stop_any``. A plain function ``(Tally) -> bool`` or
``(Tally) -> StopDecision`` is accepted wherever a rule is, through :func:`as_rule`.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Protocol, runtime_checkable

__all__ = [
    "RuleLike",
    "StopAll",
    "StopAny",
    "StopDecision",
    "StopRule",
    "StoppingRule",
    "Tally",
    "as_rule",
    "fewest_more",
]


@dataclass(frozen=True)
class Tally:
    """The samples of one step so far, as a stopping rule sees them.

    ``answers`` holds each sample's canonical answer (after answer equivalence) in arrival order,
    ``None`` where no answer could be extracted. ``confidences`` holds each sample's token confidence in
    [0, 1] where the backend gave logprobs, else ``None``. ``max_samples`` is the step's current cap.
    """

    answers: tuple[str | None, ...]
    confidences: tuple[float | None, ...] = ()
    max_samples: int = 40

    def __post_init__(self) -> None:
        if self.confidences and len(self.confidences) != len(self.answers):
            raise ValueError(f"confidences has {len(self.confidences)} items, answers {len(self.answers)}")

    @classmethod
    def of(
        cls,
        answers: Sequence[str | None],
        confidences: Sequence[float | None] | None = None,
        *,
        max_samples: int = 40,
    ) -> Tally:
        return cls(tuple(answers), tuple(confidences or ()), max_samples)

    @property
    def n(self) -> int:
        """How many samples were drawn (answered or not)."""
        return len(self.answers)

    @cached_property
    def counts(self) -> Counter[str]:
        """Votes per answer, unanswered samples left out."""
        return Counter(a for a in self.answers if a is not None)

    @cached_property
    def ranked(self) -> list[tuple[str, int]]:
        """Answers by votes, most first; ties broken by which answer appeared first."""
        first_seen: dict[str, int] = {}
        for i, a in enumerate(self.answers):
            if a is not None:
                first_seen.setdefault(a, i)
        return sorted(self.counts.items(), key=lambda kv: (-kv[1], first_seen[kv[0]]))

    @property
    def leader(self) -> str | None:
        """The majority answer so far (first seen wins a tie), or ``None`` with no answer."""
        return self.ranked[0][0] if self.ranked else None

    @property
    def leader_votes(self) -> int:
        return self.ranked[0][1] if self.ranked else 0

    @property
    def runner_up_votes(self) -> int:
        return self.ranked[1][1] if len(self.ranked) > 1 else 0

    @property
    def agreement(self) -> float:
        """Share of all samples (unanswered included) that voted for the leader; 0 with no samples."""
        return self.leader_votes / self.n if self.n else 0.0


@dataclass(frozen=True)
class StopDecision:
    """What a rule says: stop or not, its confidence in the leading answer, and a sentence of why.

    ``max_samples`` lets a rule (e.g. budget by difficulty) lower the step's cap; ``None`` keeps it.
    ``leader`` is the answer a rule that weighs votes stands behind, where that is not simply the
    answer with the most votes; ``None``: the tally's leader.
    """

    stop: bool
    confidence: float
    reason: str
    rule: str
    max_samples: int | None = None
    details: dict[str, float] = field(default_factory=dict)
    leader: str | None = None


@runtime_checkable
class StoppingRule(Protocol):
    """Anything that maps a :class:`Tally` to a :class:`StopDecision`."""

    def __call__(self, tally: Tally) -> StopDecision: ...


RuleLike = StoppingRule | Callable[[Tally], bool] | Callable[[Tally], StopDecision]


class StopRule:
    """Base class of the built-in rules: gives ``&`` and ``|`` and a readable ``name``."""

    name: str = "rule"
    order_free: bool = False
    """True when reordering the samples (answers with their confidences) never changes the decision:
    it then depends only on how many votes each answer has, how many samples had none, and
    ``max_samples``, so a replay may cache decisions by that signature."""
    soonest_on_agreement: bool = False
    """True when no samples can make the rule stop sooner than samples that all agree on one outcome
    (an answer, or none), each as confident as can be (confidence 1): :func:`fewest_more` may then
    draw the samples the rule is sure to need in one call."""

    def __call__(self, tally: Tally) -> StopDecision:
        raise NotImplementedError

    def __and__(self, other: RuleLike) -> StopAll:
        return StopAll(self, as_rule(other))

    def __rand__(self, other: RuleLike) -> StopAll:
        return StopAll(as_rule(other), self)

    def __or__(self, other: RuleLike) -> StopAny:
        return StopAny(self, as_rule(other))

    def __ror__(self, other: RuleLike) -> StopAny:
        return StopAny(as_rule(other), self)

    def __repr__(self) -> str:
        return self.name


def _lowest_cap(decisions: Sequence[StopDecision]) -> int | None:
    caps = [d.max_samples for d in decisions if d.max_samples is not None]
    return min(caps) if caps else None


class StopAll(StopRule):
    """Stop only when every rule says stop; confidence is the lowest of theirs."""

    def __init__(self, *rules: StoppingRule) -> None:
        self.rules = rules
        self.name = "(" + " & ".join(repr(r) for r in rules) + ")"
        self.order_free = all(getattr(r, "order_free", False) for r in rules)
        self.soonest_on_agreement = all(getattr(r, "soonest_on_agreement", False) for r in rules)

    def __call__(self, tally: Tally) -> StopDecision:
        decisions = [r(tally) for r in self.rules]
        stop = all(d.stop for d in decisions)
        deciding = [d for d in decisions if d.stop == stop]
        return StopDecision(
            stop=stop,
            confidence=min(d.confidence for d in decisions),
            reason="; ".join(d.reason for d in deciding),
            rule=self.name,
            max_samples=_lowest_cap(decisions),
        )


class StopAny(StopRule):
    """Stop when any rule says stop; confidence is the highest of theirs."""

    def __init__(self, *rules: StoppingRule) -> None:
        self.rules = rules
        self.name = "(" + " | ".join(repr(r) for r in rules) + ")"
        self.order_free = all(getattr(r, "order_free", False) for r in rules)
        self.soonest_on_agreement = all(getattr(r, "soonest_on_agreement", False) for r in rules)

    def __call__(self, tally: Tally) -> StopDecision:
        decisions = [r(tally) for r in self.rules]
        stop = any(d.stop for d in decisions)
        deciding = [d for d in decisions if d.stop == stop]
        return StopDecision(
            stop=stop,
            confidence=max(d.confidence for d in decisions),
            reason="; ".join(d.reason for d in deciding),
            rule=self.name,
            max_samples=_lowest_cap(decisions),
        )


class _FunctionRule(StopRule):
    """Adapts a plain callable; a bool result becomes a decision with the tally's agreement."""

    def __init__(self, fn: Callable[[Tally], bool | StopDecision]) -> None:
        self.fn = fn
        self.name = getattr(fn, "__name__", type(fn).__name__)

    def __call__(self, tally: Tally) -> StopDecision:
        out = self.fn(tally)
        if isinstance(out, StopDecision):
            return out
        if not isinstance(out, bool):
            raise TypeError(f"stopping rule {self.name} returned {type(out).__name__}, not bool")
        verb = "stop" if out else "continue"
        return StopDecision(out, tally.agreement, f"{self.name} said {verb}", self.name)


_PHANTOM = "\x00retryctl: an answer not seen yet"
"""The answer the samples of :func:`fewest_more` agree on when the tally has no leader yet."""


def fewest_more(rule: StoppingRule, tally: Tally) -> int:
    """The fewest more samples after which ``rule`` could say stop, whatever they turn out to be.

    A sampling loop that asks the rule after every sample may draw this many in one call and get
    the very same samples and the very same stop, only sooner: the rule could not have stopped in
    between. It is 1 (no promise) unless the rule stops soonest on agreement
    (:attr:`StopRule.soonest_on_agreement`); then, for each outcome the samples may agree on (an
    answer seen, most votes first, no answer, or an answer not seen yet), samples of that outcome
    at confidence 1 (where the tally has confidences) are added until the rule stops; the fewest
    over the outcomes, at most what is left to the cap.
    """
    room = tally.max_samples - tally.n
    if room <= 1 or not getattr(rule, "soonest_on_agreement", False):
        return 1
    soonest = room
    for outcome in [answer for answer, _ in tally.ranked] + [None, _PHANTOM]:
        for more in range(1, soonest):
            answers = tally.answers + (outcome,) * more
            confidences = tally.confidences + (1.0,) * more if tally.confidences else ()
            if rule(Tally(answers, confidences, tally.max_samples)).stop:
                soonest = more
                break
        if soonest == 1:
            break
    return soonest


def as_rule(rule: RuleLike) -> StoppingRule:
    """Return ``rule`` itself if it is a :class:`StopRule`, else wrap the callable."""
    if isinstance(rule, StopRule):
        return rule
    if not callable(rule):
        raise TypeError(f"a stopping rule must be callable, got {type(rule).__name__}")
    return _FunctionRule(rule)
