"""``decide``: the whole policy as one pure, deterministic function from what happened to a verdict.

Nothing here does I/O, reads a clock or keeps state: LangGraph nodes, the CLI and batch runners gather an
:class:`Observation` and act on the :class:`Verdict`. The order of the checks is the policy:

1. budget first: a spent budget, or one the call's estimate would exceed, ends the step (``stop``, or
   ``ask_user`` to extend it); and a verdict that calls for another attempt (``retry``, ``switch``,
   ``refine``) is given only if the ledgers can pay for that attempt (its estimate, and the wait
   before a retry): otherwise it is that budget verdict at once, naming the limit, with no wait;
2. an error is handled by its class: transient → ``retry`` (then ``switch``; also at once when the
   retry's wait would outlast the wall-time budget left), validation → ``refine``
   (then ``switch``), terminal or an open breaker → ``switch``, else ``stop``;
3. a failed validator → ``refine`` with feedback naming the check and its evidence;
4. a fused confidence at or above the threshold → ``accept``; when no check ran on the result (only
   that the call returned) the verdict says so, ``checked=False``, and claims no confidence;
5. otherwise the escalation ladder (``switch`` → ``refine`` → ``ask_user`` by default), then ``stop``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from retryctl.controller._afford import ONE_ATTEMPT, refusal
from retryctl.controller._budget import Usage
from retryctl.controller._errors import Classification, ErrorClass
from retryctl.controller._exhaustion import LedgerSnapshot
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
    ledgers: Sequence[LedgerSnapshot] = ()
    """The ledgers the next attempt would be charged to (a step's and its run's), as snapshots at
    decision time: a ``retry``, ``switch`` or ``refine`` is given only if each can pay for it.
    Empty: the driver keeps no ledger, and nothing is checked ahead."""
    next_cost: Mapping[str, Usage] = field(default_factory=dict)
    """What the next attempt on each member would reserve (its estimate: samples, tokens, USD); a
    member not named here is charged one attempt, the least any attempt costs."""
    backoff_s: float | None = None
    """The wait a driver would sleep before retrying this attempt's error (the engine fills it in from
    its backoff); ``None``: the error's ``Retry-After``, or no wait."""
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


def _checks_ran(obs: Observation) -> bool:
    """Whether anything checked the result: two samples or more to agree, a measured signal (token
    confidence, a verifier...), a validator that is a check (not the driver's "it returned")."""
    if obs.tally is not None and obs.tally.n >= 2:
        return True
    if any(s.available and s.name != "agreement" for s in obs.signals):
        return True
    return any(v.check for v in obs.validators)


class _Builder:
    """Holds the evidence shared by every verdict of one call, so each branch states only what differs."""

    def __init__(self, obs: Observation, policy: Policy, fusion: Fusion | None) -> None:
        self.obs = obs
        self.policy = policy
        self.fusion = fusion
        self.unchecked = fusion is not None and not _checks_ran(obs)
        """A result was judged, and nothing checked it: its verdicts claim no confidence."""
        stopping: dict[str, Any] = {}
        if obs.stop is not None:
            stopping = {
                "rule": obs.stop.rule,
                "stop": obs.stop.stop,
                "confidence": obs.stop.confidence,
                "reason": obs.stop.reason,
            }
        # What an unchecked result was accepted on is only that the call returned ("validators" 1.0 of
        # the driver's own mark): shown as a signal, it would read as a check that passed.
        measured = fusion if fusion is not None and not self.unchecked else None
        notes = [*obs.notes, *(fusion.notes if fusion else [])]
        if self.unchecked:
            notes.append("no check ran: the call returned, and nothing judged what it returned")
        self.evidence = Evidence(
            signals=dict(measured.signals) if measured else {},
            weights=dict(measured.weights) if measured else {},
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
            notes=notes,
        )

    def __call__(self, action: Action, reason: str, **extra: Any) -> Verdict:
        return Verdict(
            action=action,
            reason=reason,
            confidence=self.fusion.confidence if self.fusion and not self.unchecked else None,
            checked=not self.unchecked,
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
    """Seconds left of the wall-time budget at its tightest scope, ``None`` when wall time is not limited."""
    lefts: list[float] = []
    limit = obs.budget_limit.get("wall_s")
    if limit is not None:
        lefts.append(limit - obs.budget_used.get("wall_s", 0.0))
    for snapshot in obs.ledgers:
        scope: LedgerSnapshot | None = snapshot
        while scope is not None:
            limit = scope.limit.get("wall_s")
            if limit is not None:
                lefts.append(limit - scope.used.get("wall_s", 0.0))
            scope = scope.parent
    return max(0.0, min(lefts)) if lefts else None


def _retry_wait(obs: Observation, error: Classification | None) -> float | None:
    """The wait before a retry: the driver's backoff when the engine gave it, else the ``Retry-After``."""
    if obs.backoff_s is not None:
        return obs.backoff_s
    return error.retry_after_s if error is not None else None


def _on_error(make: _Builder, error: Classification) -> Verdict | None:
    obs, policy = make.obs, make.policy
    target = obs.target or "the call"
    breaker_open = obs.target is not None and obs.breakers.get(obs.target) == _OPEN
    if breaker_open:
        return make.switch_or_stop(f"breaker of {target!r} is open")
    if error.error_class is ErrorClass.TRANSIENT:
        left = _wall_left(obs)
        wait = _retry_wait(obs, error)
        asked = error.retry_after_s
        if wait is not None and left is not None and wait >= left and (asked is not None or wait > 0):
            # Waiting would spend the rest of the wall-time budget and the retry would then be refused;
            # a switch needs no wait.
            if asked is None:
                wants = f"would be retried after a wait of {wait:g}s"
            else:
                capped = "" if wait == asked else f" ({wait:g}s as the backoff waits it)"
                wants = f"asks for a wait of {asked:g}s{capped}"
            why = (
                f"transient fault from {target!r} ({error.reason}) {wants}, "
                f"but only {left:g}s of the wall_s budget is left"
            )
            if policy.on_budget_exhausted == "ask_user" and _next_alternative(obs, policy) is None:
                return make(Action.ASK_USER, f"{why}; asking the user whether to extend it")
            return make.switch_or_stop(why)
        if obs.retries < policy.max_retries:
            after = f", retry after {error.retry_after_s:g}s" if error.retry_after_s is not None else ""
            return make(
                Action.RETRY,
                f"transient fault from {target!r} ({error.reason}); retry "
                f"{obs.retries + 1} of {policy.max_retries}{after}",
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


def _on_budget(make: _Builder, reason: str) -> Verdict:
    if make.policy.on_budget_exhausted == "ask_user":
        return make(Action.ASK_USER, f"{reason}; asking the user whether to extend it")
    return make(Action.STOP, reason)


_NEEDS_ATTEMPT = frozenset({Action.RETRY, Action.SWITCH, Action.REFINE})


def _paid_for(make: _Builder, verdict: Verdict) -> Verdict:
    """``verdict``, or the budget verdict when its next attempt cannot be paid for (see the module
    docstring, 1): a retry that no budget can pay for is never waited for."""
    obs = make.obs
    if verdict.action not in _NEEDS_ATTEMPT or not obs.ledgers:
        return verdict
    target = verdict.switch_to if verdict.action is Action.SWITCH else obs.target
    cost = obs.next_cost.get(target, ONE_ATTEMPT) if target is not None else ONE_ATTEMPT
    wait = (_retry_wait(obs, obs.error) or 0.0) if verdict.action is Action.RETRY else 0.0
    refused = refusal(obs.ledgers, cost, wait)
    if refused is None:
        return verdict
    reason = f"{refused}; the {verdict.action.value} it called for was not started ({verdict.reason})"
    if make.policy.on_budget_exhausted == "ask_user":
        # The question carries what the budget held back, so that an extension does it.
        deferred = {"switch_to": verdict.switch_to, "feedback": verdict.feedback}
        return make(Action.ASK_USER, f"{reason}; asking the user whether to extend it", **deferred)
    return make(Action.STOP, reason)


def decide(obs: Observation, policy: Policy | None = None) -> Verdict:
    """The verdict for one attempt of a step: pure and deterministic in ``obs`` and ``policy``."""
    policy = policy or Policy()
    fusion = _fusion(obs, policy)
    make = _Builder(obs, policy, fusion)

    if obs.exhausted is not None:
        # "is spent (8 of 8)" only when committed use reached the limit; a refused reservation says
        # "would be exceeded" with the call's estimate and what was really spent (see Exhaustion).
        return _on_budget(make, str(obs.exhausted))
    return _paid_for(make, _judged(make))


def _judged(make: _Builder) -> Verdict:
    """Steps 2 to 5 of the module docstring: the verdict on what the attempt brought back."""
    obs, policy, fusion = make.obs, make.policy, make.fusion
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
    # Acceptance is decided as ever (an unchecked success is still accepted where it was); only what
    # the verdict claims differs: no confidence where nothing checked the result.
    unchecked = f"no check ran on the result of {repr(obs.target) if obs.target else 'the call'}"
    if fusion.confidence >= threshold:
        if make.unchecked:
            return make(Action.ACCEPT, f"accepted unchecked: {unchecked}")
        return make(Action.ACCEPT, f"{said} >= threshold {limit}")
    # The parts of the confidence are the signals that carry weight in it; the others (validators
    # gate, they do not score) stay in the evidence but would only pad the sentence.
    weighted = {k: v for k, v in fusion.signals.items() if fusion.weights.get(k, 0.0) > 0} or dict(
        fusion.signals
    )
    parts = ", ".join(f"{k} {v:.2f}" for k, v in weighted.items())
    why = f"{said} < threshold {limit} ({parts})"
    if make.unchecked:
        why = f"unchecked ({unchecked}): {why}"
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
