"""The attempt engine: the one state machine of a wrapped step or tool call, free of I/O.

Every driver (the LangGraph step, the tool node, the ``create_agent`` middleware, the batch runner) does
the same thing around :func:`~retryctl.controller.decide`: it acts, judges what came back, and moves on
as the verdict says (try again after a backoff, switch to another member, refine with feedback, ask a
person, finish). That bookkeeping is written here once, as plain data in and out, in the shape of
tenacity's ``iter``: the engine is handed an :class:`AttemptState` and what happened, and returns the
next state with the next :class:`Request`. The driver does the request (draws samples or calls the
tool for :class:`Act`, sleeps for :class:`Sleep`, puts an interrupt for :class:`Ask`, raises its
ledger's limits for :class:`Extend`, ends for :class:`Finish`) and comes back.

A state is a frozen dataclass of JSON values (:meth:`AttemptState.to_json`), so a driver that must
survive a restart (the step keeps it in its checkpointed graph state) stores it as it is; a driver that
runs in one call (a tool call) keeps it in a local. Nothing here reads a clock, sleeps or logs: the
driver passes in how much wall time is left and records the verdicts it is given.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from retryctl.controller._budget import COUNT_NAMES
from retryctl.controller._decide import Observation, decide
from retryctl.controller._policy import Policy
from retryctl.controller._reply import UserReply, reply_verdict
from retryctl.controller._signals import ValidatorResult
from retryctl.controller._verdict import Action, Verdict

__all__ = [
    "Act",
    "Ask",
    "AttemptEngine",
    "AttemptState",
    "Extend",
    "Feedback",
    "Finish",
    "FinishStatus",
    "Request",
    "Sleep",
    "evolve",
    "run_check",
]

FinishStatus = Literal["accepted", "answered_by_user", "refine", "stopped", "needs_user"]


@dataclass(frozen=True, kw_only=True)
class Feedback:
    """One refine round: the text that was refused and what was wrong with it."""

    previous: str | None
    feedback: str


@dataclass(frozen=True, kw_only=True)
class AttemptState:
    """Where a wrapped step or call stands: its target, what was tried, and the counters the policy
    limits. Frozen: every transition returns a new state."""

    group: tuple[str, ...]
    """The equivalence group, in the order to try its members."""
    target: str
    """The member the next (or current) attempt runs on."""
    tried: tuple[str, ...] = ()
    """Members switched away from."""
    attempt: int = 0
    """Attempts started so far (the current one's number once an :class:`Act` is out)."""
    retries: int = 0
    """Transient retries of the current target."""
    refines: int = 0
    switches: int = 0
    asks: int = 0
    """Questions put to a person so far."""
    feedback: tuple[Feedback, ...] = ()
    """The refine rounds so far, oldest first (a step appends them to its prompt)."""

    @property
    def alternatives(self) -> list[str]:
        """The members to try instead of the target: those after it, then (wrapping round) those
        before it, none already tried (as :meth:`retryctl.tools.ToolRegistry.alternatives` orders them)."""
        group = self.group
        if self.target not in group:
            return [m for m in group if m not in self.tried]
        start = group.index(self.target)
        return [m for m in (*group[start + 1 :], *group[:start]) if m not in self.tried]

    def to_json(self) -> dict[str, Any]:
        """The state as JSON values (what a checkpointer stores)."""
        return {
            "group": list(self.group),
            "target": self.target,
            "tried": list(self.tried),
            "attempt": self.attempt,
            "retries": self.retries,
            "refines": self.refines,
            "switches": self.switches,
            "asks": self.asks,
            "feedback": [{"previous": f.previous, "feedback": f.feedback} for f in self.feedback],
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> AttemptState:
        """The inverse of :meth:`to_json`."""
        return cls(
            group=tuple(data["group"]),
            target=str(data["target"]),
            tried=tuple(data.get("tried", ())),
            attempt=int(data.get("attempt", 0)),
            retries=int(data.get("retries", 0)),
            refines=int(data.get("refines", 0)),
            switches=int(data.get("switches", 0)),
            asks=int(data.get("asks", 0)),
            feedback=tuple(
                Feedback(previous=f.get("previous"), feedback=str(f["feedback"]))
                for f in data.get("feedback", ())
            ),
        )


def evolve(state: AttemptState, **changes: Any) -> AttemptState:
    """``state`` with ``changes``: what ``dataclasses.replace`` does, without its per-call field
    introspection (a transition runs on every tool call; ``replace`` was a tenth of its cost)."""
    new = object.__new__(AttemptState)
    new.__dict__.update(state.__dict__)
    new.__dict__.update(changes)
    return new


_FRESH = AttemptState(group=("-",), target="-")
"""The counters of a state that has not started (:meth:`AttemptEngine.start` sets the rest)."""


# -- requests: what the driver does next ----------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class Act:
    """Run attempt ``attempt`` on ``target``: draw samples (a step) or call the tool (a tool call).
    ``feedback`` is every refine round so far."""

    target: str
    attempt: int
    feedback: tuple[Feedback, ...] = ()


@dataclass(frozen=True, kw_only=True)
class Sleep:
    """Wait ``seconds`` (a backoff before a retry, already capped at the wall time left), then ``then``."""

    seconds: float
    then: Act


@dataclass(frozen=True, kw_only=True)
class Ask:
    """Put ``verdict`` to a person and hand their reply to :meth:`AttemptEngine.reply`."""

    verdict: Verdict


@dataclass(frozen=True, kw_only=True)
class Extend:
    """Raise the limits by ``amounts`` (by limit name) as a person allowed, then ``then``."""

    amounts: Mapping[str, float]
    then: Act


@dataclass(frozen=True, kw_only=True)
class Finish:
    """End with ``verdict``; ``status`` is what the step or call reports (see :data:`FinishStatus`)."""

    verdict: Verdict
    status: FinishStatus


Request = Act | Sleep | Ask | Extend | Finish

Backoff = Callable[[int, float | None], float]
"""The wait before retry ``n`` (1-based) of a fault that asked for ``Retry-After`` seconds (or ``None``):
a function of those two alone (``decide`` is told the wait before the driver sleeps it)."""


def _no_wait(retry_number: int, retry_after_s: float | None) -> float:
    return retry_after_s or 0.0


@dataclass(frozen=True, kw_only=True)
class AttemptEngine:
    """The transitions of :class:`AttemptState` (see the module docstring).

    ``refine_in_place``: a refine verdict starts another attempt with the feedback (a step that can
    re-ask its model); when false it finishes with status ``refine`` and the feedback goes back to
    whoever made the call (a tool call: the model that wrote the arguments fixes them).
    ``interactive``: an ``ask_user`` verdict is put to a person; when false (a batch job, CI) it
    finishes with status ``needs_user``. ``grant`` is what an ``extend`` reply adds besides the limits
    it names (a tool call costs attempts, so one more attempt by default).
    """

    policy: Policy = field(default_factory=Policy)
    backoff: Backoff = _no_wait
    refine_in_place: bool = True
    interactive: bool = True
    grant: Mapping[str, float] = field(default_factory=dict)
    _verdicts: dict[tuple[Any, ...], Verdict] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )
    """Verdicts of plain outcomes already judged (see :meth:`judge`)."""

    # -- starting ---------------------------------------------------------------------------------

    def start(
        self, group: Sequence[str], target: str | None = None, *, refines: int = 0
    ) -> tuple[AttemptState, Act]:
        """The state of a fresh step or call on ``group`` (from ``target``, or its first member), and
        its first attempt. ``refines``: refine rounds already spent (a tool's error messages earlier
        in the turn)."""
        if not group:
            raise ValueError("an attempt needs a group of at least one member")
        state = evolve(_FRESH, group=tuple(group), target=target or group[0], refines=refines)
        return self._act(state)

    @staticmethod
    def _act(state: AttemptState) -> tuple[AttemptState, Act]:
        state = evolve(state, attempt=state.attempt + 1)
        act = object.__new__(Act)  # as evolve builds a state: a frozen dataclass's __init__ is slow
        act.__dict__.update(target=state.target, attempt=state.attempt, feedback=state.feedback)
        return state, act

    # -- judging ----------------------------------------------------------------------------------

    def observe(self, state: AttemptState, **outcome: Any) -> Observation:
        """The observation of the current attempt: ``outcome`` (its tally, stop, signals, validators,
        error, budget figures and ledgers, the next attempt's cost, exhaustion, breakers, notes) with
        the state's target, alternatives and counters. With ledgers and an error, the wait a retry
        would take (this engine's backoff) goes with it, so that ``decide`` never gives a retry whose
        wait, or attempt, the budget cannot pay for."""
        error = outcome.get("error")
        if error is not None and outcome.get("ledgers") and outcome.get("backoff_s") is None:
            outcome["backoff_s"] = self.backoff(state.retries + 1, error.retry_after_s)
        return Observation(
            target=state.target,
            alternatives=state.alternatives,
            attempt=state.attempt,
            retries=state.retries,
            refines=state.refines,
            switches=state.switches,
            **outcome,
        )

    def judge(self, state: AttemptState, **outcome: Any) -> Verdict:
        """The verdict on the current attempt (:func:`~retryctl.controller.decide` on :meth:`observe`).

        ``decide`` is pure, so the verdict on a plain outcome (only validator results: no error, no
        exhaustion, no budget figures, breakers or notes; a tool call's usual success without a ledger)
        is kept and handed out again for the same outcome in the same state, the same frozen object.
        """
        key = _plain_key(state, outcome)
        if key is not None:
            known = self._verdicts.get(key)
            if known is not None:
                return known
            if "validators" in outcome:
                outcome["validators"] = key[-1]  # the results as read: an iterator is read once
        verdict = decide(self.observe(state, **outcome), self.policy)
        if key is not None:
            if len(self._verdicts) >= _VERDICTS_KEPT:
                self._verdicts.clear()  # rare: outcomes that vary (a validator's evidence) start over
            self._verdicts[key] = verdict
        return verdict

    # -- moving on --------------------------------------------------------------------------------

    def after(
        self,
        state: AttemptState,
        verdict: Verdict,
        *,
        wall_left_s: float | None = None,
        previous: str | None = None,
    ) -> tuple[AttemptState, Request]:
        """The state and request that follow ``verdict``.

        ``wall_left_s`` is the wall time left at any scope (a backoff never sleeps past it: the next
        attempt would be refused there, and the step stops within its budget instead of after it).
        ``previous`` is the refused text a refine round quotes back.
        """
        action = verdict.action
        if action is Action.ACCEPT:
            return state, Finish(verdict=verdict, status="accepted")
        if action is Action.RETRY:
            state = evolve(state, retries=state.retries + 1)
            # The wait ``observe`` gave ``decide`` (a backoff is a function of these two alone).
            wait = self.backoff(state.retries, verdict.retry_after_s)
            if wall_left_s is not None:
                wait = min(wait, max(0.0, wall_left_s))
            state, act = self._act(state)
            return state, Sleep(seconds=wait, then=act)
        if action is Action.SWITCH:
            state = evolve(
                state,
                tried=(*state.tried, state.target),
                target=verdict.switch_to or state.target,
                switches=state.switches + 1,
                retries=0,
            )
            return self._act(state)
        if action is Action.REFINE:
            if not self.refine_in_place:
                return state, Finish(verdict=verdict, status="refine")
            round_ = Feedback(previous=previous, feedback=verdict.feedback or verdict.reason)
            state = evolve(state, feedback=(*state.feedback, round_), refines=state.refines + 1, retries=0)
            return self._act(state)
        if action is Action.ASK_USER:
            if not self.interactive:
                return state, Finish(verdict=verdict, status="needs_user")
            return evolve(state, asks=state.asks + 1), Ask(verdict=verdict)
        return state, Finish(verdict=verdict, status="stopped")

    def reply(
        self, state: AttemptState, asked: Verdict, reply: UserReply, *, previous: str | None = None
    ) -> tuple[AttemptState, Verdict, Request]:
        """What a person's ``reply`` to ``asked`` decides: the verdict to log for it and the request
        that follows (finish accepted, answered or stopped; or raise the limits and try again).

        A question put because the budget could not pay for a switch or a refine carries it
        (``asked.switch_to``, ``asked.feedback``): once the limits are raised, that is the attempt
        that follows (a refine in place quotes ``previous`` back, as :meth:`after` does)."""
        decided = reply_verdict(reply, asked)
        if reply.action == "accept":
            return state, decided, Finish(verdict=decided, status="accepted")
        if reply.action == "answer":
            return state, decided, Finish(verdict=decided, status="answered_by_user")
        if reply.action == "extend":
            state = evolve(state, retries=0)
            if asked.switch_to is not None and asked.switch_to != state.target:
                state = evolve(
                    state,
                    tried=(*state.tried, state.target),
                    target=asked.switch_to,
                    switches=state.switches + 1,
                )
            elif asked.feedback is not None and self.refine_in_place:
                round_ = Feedback(previous=previous, feedback=asked.feedback)
                state = evolve(state, feedback=(*state.feedback, round_), refines=state.refines + 1)
            state, act = self._act(state)
            return state, decided, Extend(amounts=self.extension(reply.budget), then=act)
        return state, decided, Finish(verdict=decided, status="stopped")

    def extension(self, budget: Mapping[str, float]) -> dict[str, float]:
        """A reply's ``budget`` as amounts to add to the limits: :attr:`grant` plus what it names, a
        count asked for in part granted whole."""
        amounts = {**self.grant, **budget}
        return {n: float(math.ceil(v)) if n in COUNT_NAMES else float(v) for n, v in amounts.items()}


_VERDICTS_KEPT = 256
_PLAIN_EMPTY = frozenset({"budget_used", "budget_limit", "breakers", "notes", "ledgers", "next_cost"})
_PLAIN_NONE = frozenset({"error", "exhausted", "backoff_s"})


def _plain_key(state: AttemptState, outcome: Mapping[str, Any]) -> tuple[Any, ...] | None:
    """The key of a plain outcome for :meth:`AttemptEngine.judge`'s cache: every field of the
    observation it makes (the state's target, alternatives and counters, and the validator results),
    or ``None`` when the outcome holds anything else (a tally, signals, an error, budget figures...)."""
    validators: tuple[ValidatorResult, ...] = ()
    for name, value in outcome.items():
        if name == "validators":
            validators = tuple(value)
            for v in validators:
                if not (
                    type(v) is ValidatorResult
                    and type(v.name) is str
                    and type(v.passed) is bool
                    and type(v.evidence) is str
                    and type(v.check) is bool
                ):
                    return None  # a subclass or odd field types may compare or hash otherwise
        elif name in _PLAIN_EMPTY:
            if value:
                return None
        elif name not in _PLAIN_NONE or value is not None:
            return None
    return (
        state.target,
        state.group,
        state.tried,
        state.attempt,
        state.retries,
        state.refines,
        state.switches,
        validators,
    )


def run_check(check: Callable[..., ValidatorResult | bool], *args: Any) -> ValidatorResult:
    """One validator's result on ``args``. A check that raises fails, with the exception's one-line
    summary as its evidence (the evidence goes back to a model as feedback: never a traceback)."""
    name = getattr(check, "__name__", type(check).__name__)
    try:
        out = check(*args)
    except Exception as exc:
        return ValidatorResult(name, False, f"{type(exc).__name__}: {exc}")
    return out if isinstance(out, ValidatorResult) else ValidatorResult(name, bool(out))
