"""Relaxing a member's grammar constraint after a ``refine``, as the policy's schedule says.

A member's strictness is ``policy.relaxation.strictness(failures)``, its failures counted in the
step's state (``control["relaxed"]``, by member) so that a checkpointed step resumes with them. A
``refine`` of an attempt whose candidates were decoded under a grammar and failed a check is one
failure more, unless the schedule is at its floor: the verdict's reason says which, the feedback to the
model gets one line, and the record carries it as data (``candidates_summary["relaxation"]``).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from retryctl.controller import Action, Policy, Verdict
from retryctl.models import Grammar, ModelBackend
from retryctl.models._messages import Message
from retryctl.nodes._state import CandidateRecord, ControlState

__all__ = ["Relaxed", "relax", "strictness_of"]


class _Unknown:
    """A member without ``grammar_at``: which rung it moves to is not known."""


_UNKNOWN = _Unknown()


def strictness_of(policy: Policy, control: ControlState, member: str) -> float:
    """The strictness ``member``'s next attempt samples at (1.0 when the policy never relaxes)."""
    if policy.relaxation is None:
        return 1.0
    return policy.relaxation.strictness(control.get("relaxed", {}).get(member, 0))


@dataclass(frozen=True)
class Relaxed:
    """What a verdict did to a member's constraint."""

    verdict: Verdict
    """The verdict, its reason (and feedback) saying so when it relaxed or could not."""
    record: dict[str, Any] | None
    """``{member, from, to, grammar_from, grammar_to, at_floor}`` for the record (no ``grammar_to``
    when the member cannot say which rung it moves to), ``None`` when the verdict was no ``refine``
    of output decoded under a grammar that failed a check."""
    failures: dict[str, int]
    """The failures by member after it (what the step keeps in ``control["relaxed"]``)."""
    strictness: float
    """The strictness the attempt sampled at."""

    def summary(self, candidates: Sequence[CandidateRecord]) -> dict[str, Any]:
        """What the verdict's ``candidates_summary`` adds: ``grammars``, the grammar each candidate
        was decoded under, and the ``strictness`` the attempt sampled at (when any candidate was decoded
        under a grammar); ``relaxation`` (:attr:`record`, when there is one)."""
        out: dict[str, Any] = {}
        if any(c.get("grammar") for c in candidates):
            out["grammars"] = [c.get("grammar") for c in candidates]
            out["strictness"] = round(self.strictness, 6)
        if self.record is not None:
            out["relaxation"] = self.record
        return out


def _grammar_of(candidates: Sequence[CandidateRecord]) -> str | None:
    """The grammar most of the attempt's candidates were decoded under (one per attempt, normally)."""
    names = Counter(c["grammar"] for c in candidates if c.get("grammar"))
    return names.most_common(1)[0][0] if names else None


def _rung_at(backend: ModelBackend, prompt: list[Message], strictness: float) -> Grammar | _Unknown | None:
    """The rung ``backend`` decodes under at ``strictness``; :data:`_UNKNOWN` without ``grammar_at``."""
    grammar_at = getattr(backend, "grammar_at", None)
    if not callable(grammar_at):
        return _UNKNOWN
    rung = grammar_at(prompt, strictness)
    return rung if isinstance(rung, Grammar) else None


def _rungs(was: str, now: Grammar | _Unknown | None) -> str:
    if isinstance(now, _Unknown):
        return f"(was grammar {was!r})"
    if now is None:
        return f"(grammar {was!r} -> none: checked after decoding only)"
    return f"(grammar {was!r} still)" if now.name == was else f"(grammar {was!r} -> {now.name!r})"


def _feedback_line(now: Grammar | _Unknown | None) -> str:
    if now is None:
        return "Your output is no longer held to a grammar."
    if isinstance(now, _Unknown):
        return "Your output is now held to a looser constraint."
    said = f": {now.description}" if now.description else ""
    return f"Your output is now held to the wider grammar {now.name!r}{said}."


def relax(
    verdict: Verdict,
    *,
    policy: Policy,
    control: ControlState,
    member: str,
    backend: ModelBackend,
    prompt: Callable[[], list[Message]],
    candidates: Sequence[CandidateRecord],
    checks_failed: bool,
) -> Relaxed:
    """The verdict of ``member``'s attempt after the relaxation schedule has had its say (``prompt``
    gives the attempt's conversation, which a ladder may depend on: asked only when it relaxes).

    Only a refine for a failed check relaxes (``checks_failed``): output the grammar let through and a
    check still refused is a failure of the constraint. A refine for low agreement is not: candidates
    that disagree under the grammar would disagree as much under a wider one, and a wider rung only
    admits more of what the check refuses (measured on the demo: after such a relaxation the
    expression members wrote ``11 * 2`` for a question giving 11, 2 and 8)."""
    failures = control.get("relaxed", {})
    schedule = policy.relaxation
    count = failures.get(member, 0)
    before = 1.0 if schedule is None else schedule.strictness(count)
    if schedule is None or verdict.action is not Action.REFINE or not checks_failed:
        return Relaxed(verdict, None, failures, before)
    was = _grammar_of(candidates)
    if was is None:
        return Relaxed(verdict, None, failures, before)
    failures = dict(failures)
    if schedule.at_floor(count):
        reason = f"{verdict.reason}; {member}'s constraint is at its floor {before:.2f} (grammar {was!r})"
        floor: dict[str, Any] = {
            "member": member,
            "from": round(before, 6),
            "to": round(before, 6),
            "grammar_from": was,
            "grammar_to": was,
            "at_floor": True,
        }
        return Relaxed(verdict.model_copy(update={"reason": reason}), floor, failures, before)
    after = schedule.strictness(count + 1)
    failures[member] = count + 1
    now = _rung_at(backend, prompt(), after)
    reason = (
        f"{verdict.reason}; relaxing {member}'s constraint: strictness {before:.2f} -> {after:.2f} "
        f"{_rungs(was, now)}"
    )
    feedback = f"{verdict.feedback or verdict.reason}\n{_feedback_line(now)}"
    record: dict[str, Any] = {
        "member": member,
        "from": round(before, 6),
        "to": round(after, 6),
        "grammar_from": was,
        "at_floor": False,
    }
    if not isinstance(now, _Unknown):  # a member without ``grammar_at`` does not say where it goes
        record["grammar_to"] = None if now is None else now.name
    relaxed = verdict.model_copy(update={"reason": reason, "feedback": feedback})
    return Relaxed(relaxed, record, failures, before)
