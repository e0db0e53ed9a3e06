"""``decide``: the whole policy as one pure, deterministic function from what happened to a verdict.

Nothing here does I/O, reads a clock or keeps state: LangGraph nodes, the CLI and batch runners gather an
:class:`Observation` and act on the :class:`Verdict`. The order of the checks is the policy:

1. a spent budget, or one the next call's estimate would exceed, ends the step (``stop``, or
   ``ask_user`` to extend it);
2. an error is handled by its class: transient → ``retry`` (then ``switch``; also at once when its
   ``Retry-After`` is longer than the wall-time budget left), validation → ``refine``
   (then ``switch``), terminal or an open breaker → ``switch``, else ``stop``;
3. a failed validator → ``refine`` with feedback naming the check and its evidence;
4. a fused confidence at or above the threshold → ``accept``;
5. otherwise the escalation ladder (``switch`` → ``refine`` → ``ask_user`` by default), then ``stop``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from retryctl.controller._errors import Classification, ErrorClass
from retryctl.controller._ledger import Exhaustion
from retryctl.controller._policy import Policy
from retryctl.controller._signals import Fusion, Signal, ValidatorResult, fuse, validators_signal
from retryctl.controller._verdict import Action, Evidence, Verdict
from retryctl.controller.stopping import StopDecision, Tally

__all__ = ["CALIBRATED", "FUSED", "Observation", "decide"]

_OPEN = "open"
FUSED = "fused"
"""The evidence signal holding the raw fused confidence when a calibration applies."""
CALIBRATED = "calibrated"
"""The evidence signal holding the calibrated confidence (the verdict's own) when a calibration applies."""


@dataclass(frozen=True, kw_only=True)
class Observation:
    """Everything that happened in one attempt of a step, as plain data."""

    target: str | None = None
    """The tool or model that acted."""
    alternatives: Sequence[str] = ()
    """Untried members of the target's equivalence group, in the order to try them."""
    tally: Tally | None = None
    """The candidates' canonical answers (and token confidences) so far."""
    stop: StopDecision | None = None
    """What the stopping rule said about the tally."""
    signals: Sequence[Signal] = ()
    """Measured signals (token confidence, verifier, ...); agreement is derived from the tally."""
    validators: Sequence[ValidatorResult] = ()
    """Checks run on the best candidate or the tool result."""
    error: Classification | None = None
    """The classified error of the call, if it failed."""
    attempt: int = 1
    retries: int = 0
    """Transient retries of this target so far."""
    refines: int = 0
    switches: int = 0
    budget_used: Mapping[str, float] = field(default_factory=dict)
    budget_limit: Mapping[str, float | None] = field(default_factory=dict)
    budget_scope: Literal["step", "run"] | None = None
    """Whose ledger the budget figures are (see :attr:`Evidence.budget_scope`)."""
    budget_charged: Mapping[str, float] = field(default_factory=dict)
    """What this attempt charged to that ledger (see :attr:`Evidence.budget_charged`)."""
    exhausted: Exhaustion | None = None
    """The first spent limit of the step or run ledger, if any."""
    breakers: Mapping[str, str] = field(default_factory=dict)
    """Breaker state by key (``closed``, ``open``, ``half_open``)."""
    notes: Sequence[str] = ()

    @property
    def answer(self) -> str | None:
        """The answer of the attempt: the stopping rule's where it weighs votes, else the most voted."""
        if self.stop is not None and self.stop.leader is not None:
            return self.stop.leader
        return self.tally.leader if self.tally else None


def _agreement(obs: Observation) -> Signal | None:
    # The stopping rule's posterior accounts for how many samples were drawn; a raw share does not
    # (one sample "agrees" with itself 100 %), so the posterior is the agreement signal when there is one.
    if obs.tally is None or obs.tally.n == 0:
        return None
    if obs.stop is not None:
        return Signal(
            "agreement",
            min(1.0, max(0.0, obs.stop.confidence)),
            note=f"posterior of {obs.stop.rule} over {obs.tally.n} samples",
        )
    return Signal("agreement", obs.tally.agreement)


def _fusion(obs: Observation, policy: Policy) -> Fusion | None:
    signals = [s for s in obs.signals if s.name != "agreement"]
    agreement = _agreement(obs)
    if agreement is not None:
        signals.append(agreement)
    if obs.validators:
        signals.append(validators_signal(obs.validators))
    if not signals or all(not s.available for s in signals):
        return None
    fusion = fuse(signals, policy.weights)
    if policy.calibration is None:
        return fusion
    # The verdict's confidence becomes the calibrated one (what the threshold is compared with); the
    # raw fused value stays beside it in the evidence, so a reader sees both and the map's effect.
    calibrated = policy.calibration(fusion.confidence, obs.target)
    return Fusion(
        calibrated,
        {**fusion.signals, FUSED: fusion.confidence, CALIBRATED: calibrated},
        fusion.weights,
        fusion.notes,
    )


def _next_alternative(obs: Observation, policy: Policy) -> str | None:
    if policy.max_switches is not None and obs.switches >= policy.max_switches:
        return None
    for key in obs.alternatives:
        if key != obs.target and obs.breakers.get(key) != _OPEN:
            return key
    return None


class _Builder:
    """Holds the evidence shared by every verdict of one call, so each branch states only what differs."""

    def __init__(self, obs: Observation, policy: Policy, fusion: Fusion | None) -> None:
        self.obs = obs
        self.policy = policy
        self.fusion = fusion
        stopping: dict[str, Any] = {}
        if obs.stop is not None:
            stopping = {
                "rule": obs.stop.rule,
                "stop": obs.stop.stop,
                "confidence": obs.stop.confidence,
                "reason": obs.stop.reason,
            }
        self.evidence = Evidence(
            signals=dict(fusion.signals) if fusion else {},
            weights=dict(fusion.weights) if fusion else {},
            thresholds={
                "accept": policy.accept_threshold,
                "max_retries": policy.max_retries,
                "max_refines": policy.max_refines,
            },
            budget_used=dict(obs.budget_used),
            budget_limit=dict(obs.budget_limit),
            budget_scope=obs.budget_scope,
            budget_charged=dict(obs.budget_charged),
            breakers=dict(obs.breakers),
            error_class=obs.error.error_class.value if obs.error else None,
            stopping=stopping,
            notes=[*obs.notes, *(fusion.notes if fusion else [])],
        )

    def __call__(self, action: Action, reason: str, **extra: Any) -> Verdict:
        return Verdict(
            action=action,
            reason=reason,
            confidence=self.fusion.confidence if self.fusion else None,
            answer=self.obs.answer,
            evidence=self.evidence,
            **extra,
        )

    def switch_or_stop(self, why: str) -> Verdict:
        alternative = _next_alternative(self.obs, self.policy)
        if alternative is not None:
            return self(Action.SWITCH, f"{why}; switching to {alternative!r}", switch_to=alternative)
        return self(Action.STOP, f"{why}; no alternative left to switch to")


def _wall_left(obs: Observation) -> float | None:
    """Seconds left of the wall-time budget, ``None`` when wall time is not limited."""
    limit = obs.budget_limit.get("wall_s")
    if limit is None:
        return None
    return max(0.0, limit - obs.budget_used.get("wall_s", 0.0))


def _on_error(make: _Builder, error: Classification) -> Verdict | None:
    obs, policy = make.obs, make.policy
    target = obs.target or "the call"
    breaker_open = obs.target is not None and obs.breakers.get(obs.target) == _OPEN
    if breaker_open:
        return make.switch_or_stop(f"breaker of {target!r} is open")
    if error.error_class is ErrorClass.TRANSIENT:
        left = _wall_left(obs)
        if error.retry_after_s is not None and left is not None and error.retry_after_s >= left:
            # Waiting would spend the rest of the wall-time budget and the retry would then be refused.
            why = (
                f"transient fault from {target!r} ({error.reason}) asks for a wait of "
                f"{error.retry_after_s:g}s, but only {left:g}s of the wall_s budget is left"
            )
            if policy.on_budget_exhausted == "ask_user" and _next_alternative(obs, policy) is None:
                return make(Action.ASK_USER, f"{why}; asking the user whether to extend it")
            return make.switch_or_stop(why)
        if obs.retries < policy.max_retries:
            wait = f", retry after {error.retry_after_s:g}s" if error.retry_after_s is not None else ""
            return make(
                Action.RETRY,
                f"transient fault from {target!r} ({error.reason}); retry "
                f"{obs.retries + 1} of {policy.max_retries}{wait}",
                retry_after_s=error.retry_after_s,
            )
        return make.switch_or_stop(
            f"transient fault from {target!r} persisted after {obs.retries} retries ({error.reason})"
        )
    if error.error_class is ErrorClass.VALIDATION:
        if obs.refines < policy.max_refines:
            return make(
                Action.REFINE,
                f"{target!r} was called with invalid input: {error.reason}",
                feedback=f"The call to {target} failed validation: {error.reason}. Fix it and try again.",
            )
        return make.switch_or_stop(f"still invalid after {obs.refines} refines ({error.reason})")
    if error.error_class is ErrorClass.TERMINAL:
        return make.switch_or_stop(f"{target!r} failed and will not recover ({error.reason})")
    return None  # semantic errors are a confidence problem: the ladder below handles them


def _on_low_confidence(make: _Builder, why: str, feedback: str) -> Verdict:
    obs, policy = make.obs, make.policy
    for step in policy.low_confidence:
        if step == "switch":
            alternative = _next_alternative(obs, policy)
            if alternative is not None:
                return make(Action.SWITCH, f"{why}; switching to {alternative!r}", switch_to=alternative)
        elif step == "refine":
            if obs.refines < policy.max_refines:
                return make(
                    Action.REFINE,
                    f"{why}; refine {obs.refines + 1} of {policy.max_refines}",
                    feedback=feedback,
                )
        elif step == "ask_user":
            return make(Action.ASK_USER, f"{why}; asking the user")
        else:
            return make(Action.STOP, f"{why}; stopping as the policy says")
    return make(Action.STOP, f"{why}; nothing left to try")


def _distinct(value: float, threshold: float) -> tuple[str, str]:
    """Both numbers with two decimals, or as many more as it takes for them not to print equal
    (a reason must never read "confidence 0.80 < threshold 0.80")."""
    a, b = f"{value:.2f}", f"{threshold:.2f}"
    digits = 2
    while a == b and digits < 6 and value != threshold:
        digits += 1
        a, b = f"{value:.{digits}f}", f"{threshold:.{digits}f}"
    return a, b


def decide(obs: Observation, policy: Policy | None = None) -> Verdict:
    """The verdict for one attempt of a step: pure and deterministic in ``obs`` and ``policy``."""
    policy = policy or Policy()
    fusion = _fusion(obs, policy)
    make = _Builder(obs, policy, fusion)

    if obs.exhausted is not None:
        # "is spent (8 of 8)" only when committed use reached the limit; a refused reservation says
        # "would be exceeded" with the call's estimate and what was really spent (see Exhaustion).
        reason = str(obs.exhausted)
        if policy.on_budget_exhausted == "ask_user":
            return make(Action.ASK_USER, f"{reason}; asking the user whether to extend it")
        return make(Action.STOP, reason)

    if obs.error is not None:
        verdict = _on_error(make, obs.error)
        if verdict is not None:
            return verdict

    failed = [v for v in obs.validators if not v.passed]
    if failed:
        checks = "; ".join(f"{v.name}: {v.evidence}" if v.evidence else v.name for v in failed)
        feedback = f"The answer failed these checks: {checks}. Correct it and answer again."
        if obs.refines < policy.max_refines:
            return make(Action.REFINE, f"failed check(s) {checks}", feedback=feedback)
        return _on_low_confidence(make, f"failed check(s) {checks} after {obs.refines} refines", feedback)

    if fusion is None:
        why = obs.error.reason if obs.error else "no candidate to judge"
        return _on_low_confidence(make, why, f"No usable answer was produced ({why}). Try again.")

    threshold = policy.accept_threshold
    conf, limit = _distinct(fusion.confidence, threshold)
    said = f"confidence {conf}"
    if policy.calibration is not None:
        said = f"calibrated confidence {conf} (fused {fusion.signals[FUSED]:.2f})"
    if fusion.confidence >= threshold:
        return make(Action.ACCEPT, f"{said} >= threshold {limit}")
    # The parts of the confidence are the signals that carry weight in it; the others (validators
    # gate, they do not score) stay in the evidence but would only pad the sentence.
    weighted = {k: v for k, v in fusion.signals.items() if fusion.weights.get(k, 0.0) > 0} or dict(
        fusion.signals
    )
    parts = ", ".join(f"{k} {v:.2f}" for k, v in weighted.items())
    why = f"{said} < threshold {limit} ({parts})"
    if obs.error is not None:
        why = f"{why}; {obs.error.reason}"
    return _on_low_confidence(make, why, _low_confidence_feedback(conf, limit, weighted))


_MEANING = {
    "token_confidence": "the model was unsure of its own words",
    "weakest_span": "part of the answer was a guess",
    "verifier": "the verifier doubted the answer",
}
"""What a low value of each built-in signal but agreement says, for the refine feedback."""


def _low_confidence_feedback(conf: str, limit: str, weighted: Mapping[str, float]) -> str:
    """The feedback of a low confidence, naming the signal that pulled it down the most.

    "Not consistent" only when agreement is that signal (the sentence is the one the demo's figures
    were measured with); otherwise the weakest signal is named with what it means, so an unsure
    model is never told that its answers disagreed. A failed check has its own feedback (step 3).
    """
    parts = ", ".join(f"{k} {v:.2f}" for k, v in weighted.items())
    name, value = min(weighted.items(), key=lambda kv: kv[1])
    if name == "agreement":
        return (
            f"Your answers were not consistent enough ({parts}). "
            "Re-check each step and give one final answer."
        )
    meaning = _MEANING.get(name, "the weakest part of the confidence")
    return (
        f"Your answer was not trusted: confidence {conf} < threshold {limit}, weakest signal {name} "
        f"{value:.2f} ({meaning}). Re-check each step and give one final answer."
    )
