"""Counting rules: a fixed number of samples, the threshold mode, the ESC window, budget by difficulty."""

from __future__ import annotations

from dataclasses import dataclass, field

from retryctl.controller.stopping._base import StopDecision, StopRule, Tally
from retryctl.controller.stopping._validate import check_int_at_least, check_probability
from retryctl.controller.stopping._votes import cap_reached, describe_leader, votes_of
from retryctl.exceptions import ConfigError

__all__ = ["DifficultyBudget", "EscWindow", "FixedSamples", "ThresholdRule"]


@dataclass(frozen=True, kw_only=True, repr=False)
class FixedSamples(StopRule):
    """Plain self-consistency: always draw ``n`` samples, then take the majority."""

    n: int = 40
    """How many samples to draw."""
    name: str = field(init=False, default="sc", compare=False)
    order_free: bool = field(init=False, default=True, compare=False)
    soonest_on_agreement: bool = field(init=False, default=True, compare=False)

    def __post_init__(self) -> None:
        check_int_at_least("n", self.n, 1)
        object.__setattr__(self, "name", f"sc-{self.n}")

    def __call__(self, tally: Tally) -> StopDecision:
        if tally.n >= min(self.n, tally.max_samples):
            return cap_reached(tally, self.name, tally.agreement, self.n)
        return StopDecision(
            stop=False,
            confidence=tally.agreement,
            reason=f"{tally.n} of {self.n} fixed samples drawn",
            rule=self.name,
            max_samples=self.n,
        )


@dataclass(frozen=True, kw_only=True, repr=False)
class ThresholdRule(StopRule):
    """The threshold mode: between min and max samples, stop once confidence or agreement is high.

    Confidence is the mean token confidence of the leader's samples where the backend gave logprobs;
    agreement is the leader's share of all samples (unanswered ones count against it).
    """

    min_samples: int = 2
    """Never stop before this many samples."""
    max_samples: int = 8
    """Never draw more than this many samples (lowers the step's cap)."""
    confidence: float = 0.9
    """Stop when the leader's mean token confidence reaches this."""
    agreement: float = 0.8
    """Stop when the leader's share of the samples reaches this."""
    name: str = field(init=False, default="threshold", compare=False)
    order_free: bool = field(init=False, default=True, compare=False)
    soonest_on_agreement: bool = field(init=False, default=True, compare=False)

    def __post_init__(self) -> None:
        check_int_at_least("min_samples", self.min_samples, 1)
        check_int_at_least("max_samples", self.max_samples, 1)
        if self.min_samples > self.max_samples:
            raise ConfigError(
                field="min_samples",
                value=self.min_samples,
                problem=f"must be <= max_samples ({self.max_samples})",
            )
        check_probability("confidence", self.confidence)
        check_probability("agreement", self.agreement)

    def leader_confidence(self, tally: Tally) -> float | None:
        """Mean token confidence of the leader's samples, or ``None`` where none is known."""
        if not tally.confidences or tally.leader is None:
            return None
        known = [
            c
            for a, c in zip(tally.answers, tally.confidences, strict=True)
            if a == tally.leader and c is not None
        ]
        return sum(known) / len(known) if known else None

    def __call__(self, tally: Tally) -> StopDecision:
        token = self.leader_confidence(tally)
        agreement = tally.agreement
        shown = agreement if token is None else token
        details = {"agreement": agreement} | ({} if token is None else {"token_confidence": token})
        if tally.n >= min(self.max_samples, tally.max_samples):
            return cap_reached(tally, self.name, shown, self.max_samples)
        if tally.n < self.min_samples:
            return StopDecision(
                stop=False,
                confidence=shown,
                reason=f"{tally.n} samples < min_samples {self.min_samples}",
                rule=self.name,
                max_samples=self.max_samples,
                details=details,
            )
        if token is not None and token >= self.confidence:
            reason = f"leader's token confidence {token:.3f} >= {self.confidence}"
            stop = True
        elif agreement >= self.agreement:
            reason = f"agreement {agreement:.3f} >= {self.agreement}"
            stop = True
        else:
            conf_part = "" if token is None else f"token confidence {token:.3f} < {self.confidence}, "
            reason = f"{conf_part}agreement {agreement:.3f} < {self.agreement}"
            stop = False
        return StopDecision(stop, shown, reason, self.name, self.max_samples, details)


@dataclass(frozen=True, kw_only=True, repr=False)
class EscWindow(StopRule):
    """Early-stopping self-consistency: draw windows of ``window`` samples; stop at a unanimous one."""

    window: int = 5
    """Samples per window; a window whose outcomes all agree (all unanswered counts) stops sampling."""
    name: str = field(init=False, default="esc", compare=False)

    def __post_init__(self) -> None:
        check_int_at_least("window", self.window, 1)
        object.__setattr__(self, "name", f"esc-{self.window}")

    def __call__(self, tally: Tally) -> StopDecision:
        if tally.n >= tally.max_samples:
            return cap_reached(tally, self.name, tally.agreement)
        if tally.n == 0 or tally.n % self.window:
            return StopDecision(
                stop=False,
                confidence=tally.agreement,
                reason=f"window {tally.n // self.window + 1} has "
                f"{tally.n % self.window} of {self.window} samples",
                rule=self.name,
            )
        last = tally.answers[-self.window :]
        unanimous = all(a == last[0] for a in last)
        what = "no answer" if last[0] is None else repr(last[0])
        reason = (
            f"last window of {self.window} unanimous ({what})"
            if unanimous
            else f"last window of {self.window} split {len(set(last))} ways"
        )
        share = max(last.count(a) for a in set(last)) / self.window
        return StopDecision(unanimous, share, reason, self.name, details={"window_share": share})


@dataclass(frozen=True, kw_only=True, repr=False)
class DifficultyBudget(StopRule):
    """Budget by difficulty: after ``probe`` samples, set the step's cap from how many outcomes appeared.

    One outcome in the probe → ``easy_max`` (the probe itself by default: it agreed); two →
    ``medium_max``; three or more → ``hard_max``. Use it alone (sample to that cap) or combine it with a
    posterior rule (``DifficultyBudget() | AdaptiveBeta()`` stops at whichever comes first).
    """

    probe: int = 3
    """How many first samples estimate the difficulty."""
    easy_max: int = 3
    """Cap when the probe samples all agree."""
    medium_max: int = 12
    """Cap when the probe saw two outcomes."""
    hard_max: int = 40
    """Cap when the probe saw three or more outcomes (capped by the step's own maximum)."""
    name: str = field(init=False, default="budget", compare=False)

    def __post_init__(self) -> None:
        check_int_at_least("probe", self.probe, 1)
        for name in ("easy_max", "medium_max", "hard_max"):
            value = getattr(self, name)
            check_int_at_least(name, value, self.probe)
        if not self.easy_max <= self.medium_max <= self.hard_max:
            raise ConfigError(
                field="medium_max",
                value=self.medium_max,
                problem=f"caps must grow with difficulty: easy_max {self.easy_max} <= medium_max "
                f"<= hard_max {self.hard_max}",
            )

    def cap_for(self, distinct: int) -> int:
        """The cap for a probe that saw ``distinct`` outcomes."""
        return self.easy_max if distinct <= 1 else self.medium_max if distinct == 2 else self.hard_max

    def __call__(self, tally: Tally) -> StopDecision:
        if tally.n < self.probe:
            if tally.n >= tally.max_samples:
                return cap_reached(tally, self.name, tally.agreement)
            return StopDecision(
                stop=False,
                confidence=tally.agreement,
                reason=f"probing difficulty: {tally.n} of {self.probe} samples",
                rule=self.name,
            )
        probe = tally.answers[: self.probe]
        distinct = len(set(probe))
        cap = self.cap_for(distinct)
        level = "easy" if distinct <= 1 else "medium" if distinct == 2 else "hard"
        details = {"difficulty": (distinct - 1) / max(1, self.probe - 1), "cap": float(cap)}
        if tally.n >= min(cap, tally.max_samples):
            decision = cap_reached(tally, self.name, tally.agreement, cap)
            reason = f"{level} ({distinct} outcomes in {self.probe} probe samples): {decision.reason}"
            return StopDecision(True, decision.confidence, reason, self.name, cap, details)
        votes = votes_of(tally)
        return StopDecision(
            stop=False,
            confidence=tally.agreement,
            reason=f"{level} ({distinct} outcomes in {self.probe} probe samples), cap {cap}; "
            f"{describe_leader(tally, votes)}",
            rule=self.name,
            max_samples=cap,
            details=details,
        )
