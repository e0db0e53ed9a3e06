"""The budget ledger: a run ledger holding step ledgers, with reserve-before / commit-after accounting.

A call first *reserves* its upper-bound estimate (``max_tokens``, the samples asked for, their price); the
reservation is refused if it would take any total (committed plus reserved) past a limit, at the step or
at the run. After the call, the actual usage is *committed*, or the reservation is *released* if the call
failed before costing anything. A step's usage counts in its run too.

The invariant the controller relies on: **no committed total ever exceeds its limit**. If a call reports
more than it reserved (a wrong estimate), the ledger charges the estimate and records the excess as
``overrun``, visible in :meth:`Ledger.snapshot` and returned by ``commit``, instead of breaking it.

Wall time is not added up (calls overlap): it is the injected clock's time since the ledger opened.
Totals are exact fractions of the decimal values given (``0.1`` counts as 1/10), so sums never drift
with float rounding: three calls of 0.1 USD exactly fill a 0.3 USD budget. All methods are
thread-safe and take microseconds under one lock per run, so they are safe to call from asyncio tasks.

Exhaustion is data (:class:`Exhaustion`, from :meth:`Ledger.try_reserve` and :meth:`Ledger.exhausted`);
:meth:`Ledger.reserve` raises :class:`~retryctl.exceptions.BudgetExceeded` for callers that want one.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from types import TracebackType

from retryctl.controller._budget import ADDITIVE_NAMES, COUNT_NAMES, LIMIT_NAMES, Budget, Usage
from retryctl.controller._clock import Clock, monotonic
from retryctl.controller._exhaustion import Exhaustion, LedgerSnapshot
from retryctl.exceptions import ConfigError, UsageError

__all__ = ["Exhaustion", "Ledger", "LedgerSnapshot", "Reservation", "StepLedger"]

_Num = int | Fraction
_Amounts = dict[str, _Num]


def _zero() -> _Amounts:
    return dict.fromkeys(ADDITIVE_NAMES, 0)


def _over_limit(
    limits: Mapping[str, _Num], used: Mapping[str, _Num], held: Mapping[str, _Num], want: Mapping[str, _Num]
) -> str | None:
    """The first limit (of those set, by name) that ``used + held + want`` would pass, or ``None``.
    The one test of a reservation: the ledger's, and ``decide``'s on snapshots (``_afford``)."""
    for name, limit in limits.items():
        if used[name] + held[name] + want[name] > limit:
            return name
    return None


def _clock_refuses(elapsed: float, wall_s: float, limit: float) -> bool:
    """Whether a call of ``wall_s`` seconds, after ``elapsed`` of a ``limit``, is refused. No call takes
    zero time, so a spent clock refuses even a zero-duration estimate."""
    return elapsed >= limit or elapsed + wall_s > limit


def _exact(value: float) -> _Num:
    """The decimal number a float prints as (0.1 is 1/10), so that 0.1 + 0.2 fits a limit of 0.3.

    Counts stay ints, which keeps their arithmetic fast; only fractional amounts become fractions.
    """
    if isinstance(value, int) or value.is_integer():
        return int(value)
    return Fraction(repr(value))


def _amounts(usage: Usage) -> _Amounts:
    return {n: _exact(getattr(usage, n)) for n in ADDITIVE_NAMES}


@dataclass(eq=False, slots=True)
class Reservation:
    """Budget held for one call: commit it with the actual usage, or release it.

    Also a context manager that releases the reservation on exit unless it was committed, so a call
    that raises gives its budget back.
    """

    estimate: Usage
    """What was reserved: the call's upper bound."""
    ledger: _Scope
    """The ledger (run or step) that holds it."""
    id: int
    """Unique within the run."""
    _amounts: _Amounts = field(repr=False, default_factory=dict)
    state: str = "open"
    """``open``, ``committed`` or ``released``."""

    def commit(self, actual: Usage) -> Usage:
        """Shorthand for ``ledger.commit(self, actual)``."""
        return self.ledger.commit(self, actual)

    def release(self) -> None:
        """Shorthand for ``ledger.release(self)``."""
        self.ledger.release(self)

    def __enter__(self) -> Reservation:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self.state == "open":
            self.release()


class _Run:
    """What every scope of one run shares: the lock, the clock and the reservation ids."""

    def __init__(self, clock: Clock) -> None:
        self.lock = threading.Lock()
        self.clock = clock
        self.ids = itertools.count(1)


class _Scope:
    """The accounting shared by the run ledger and its step ledgers."""

    def __init__(self, budget: Budget, run: _Run, parent: _Scope | None, step_id: str | None):
        self.budget = budget
        self._limits = {n: _exact(v) for n in ADDITIVE_NAMES if (v := getattr(budget, n)) is not None}
        self.step_id = step_id
        self.scope = "run" if step_id is None else f"step {step_id!r}"
        self._run = run
        self._parent = parent
        self._start = run.clock()
        self._committed = _zero()
        self._reserved = _zero()
        self._overrun = _zero()

    def _chain(self) -> Iterator[_Scope]:
        scope: _Scope | None = self
        while scope is not None:
            yield scope
            scope = scope._parent

    def _elapsed(self, now: float) -> float:
        return max(0.0, now - self._start)

    def _refusal(self, want: _Amounts, wall_s: float, now: float) -> Exhaustion | None:
        name = _over_limit(self._limits, self._committed, self._reserved, want)
        if name is not None:
            limit = getattr(self.budget, name)
            return self._exhaustion(name, limit, self._committed[name], want[name], self._reserved[name])
        limit = self.budget.wall_s
        if limit is not None:
            elapsed = self._elapsed(now)
            if _clock_refuses(elapsed, wall_s, limit):
                return self._exhaustion("wall_s", limit, elapsed, wall_s)
        return None

    def _spent(self, now: float) -> Exhaustion | None:
        for name in ADDITIVE_NAMES:
            limit = getattr(self.budget, name)
            if limit is not None and self._committed[name] >= self._limits[name]:
                return self._exhaustion(name, limit, self._committed[name], 0)
        limit = self.budget.wall_s
        if limit is not None and self._elapsed(now) >= limit:
            return self._exhaustion("wall_s", limit, self._elapsed(now), 0)
        return None

    def _exhaustion(
        self, name: str, limit: float, used: _Num | float, requested: _Num | float, reserved: _Num = 0
    ) -> Exhaustion:
        return Exhaustion(
            limit_name=name,
            limit=limit,
            used=float(used),
            requested=float(requested),
            scope=self.scope,
            step_id=self.step_id,
            reserved=float(reserved),
        )

    # -- the protocol ---------------------------------------------------------------------------

    def try_reserve(self, estimate: Usage) -> Reservation | Exhaustion:
        """Hold ``estimate`` at this scope and every enclosing one, or say which limit refuses it."""
        want = _amounts(estimate)
        with self._run.lock:
            now = self._run.clock()
            chain = list(self._chain())
            for scope in chain:
                refusal = scope._refusal(want, estimate.wall_s, now)
                if refusal is not None:
                    return refusal
            for scope in chain:
                for name in ADDITIVE_NAMES:
                    scope._reserved[name] += want[name]
            return Reservation(estimate=estimate, ledger=self, id=next(self._run.ids), _amounts=want)

    def reserve(self, estimate: Usage) -> Reservation:
        """Like :meth:`try_reserve`, but a refusal raises :class:`BudgetExceeded`."""
        result = self.try_reserve(estimate)
        if isinstance(result, Exhaustion):
            raise result.to_exception()
        return result

    def commit(self, reservation: Reservation, actual: Usage) -> Usage:
        """Charge ``actual`` for a reserved call; return what passed the estimate (normally zeros).

        Each quantity is charged at most its reserved amount, so no committed total can pass a limit;
        any excess is recorded as ``overrun`` at every scope (``actual.wall_s`` is ignored: the clock
        measures wall time).
        """
        got = _amounts(actual)
        with self._run.lock:
            self._close(reservation, "committed")
            held = reservation._amounts
            charged = {n: min(got[n], held[n]) for n in ADDITIVE_NAMES}
            excess = {n: got[n] - charged[n] for n in ADDITIVE_NAMES}
            for scope in reservation.ledger._chain():
                for n in ADDITIVE_NAMES:
                    scope._reserved[n] -= held[n]
                    scope._committed[n] += charged[n]
                    scope._overrun[n] += excess[n]
        return _usage(excess)

    def release(self, reservation: Reservation) -> None:
        """Give a reservation back unused (the call failed before it cost anything)."""
        with self._run.lock:
            self._close(reservation, "released")
            for scope in reservation.ledger._chain():
                for n in ADDITIVE_NAMES:
                    scope._reserved[n] -= reservation._amounts[n]

    def _close(self, reservation: Reservation, outcome: str) -> None:
        if reservation.ledger._run is not self._run:
            raise UsageError(f"reservation {reservation.id} belongs to another run's ledger")
        if reservation.state != "open":
            raise UsageError(f"reservation {reservation.id} was already {reservation.state}")
        reservation.state = outcome

    def carry(self, used: Mapping[str, float]) -> None:
        """Count ``used`` (amounts by limit name) as committed here and at every enclosing scope: what a
        run spent before this process met it, read back from its state (a step's, an agent run's).

        Each amount is capped at the tightest limit of the chain, so use above a limit lowered since
        counts as that limit spent, never as an overrun. ``wall_s`` is no amount: give the ledger a
        ``controller._clock.ShiftedClock`` instead."""
        with self._run.lock:
            chain = list(self._chain())
            for name in ADDITIVE_NAMES:
                amount = _exact(used.get(name, 0))
                if amount <= 0:
                    continue
                for scope in chain:
                    if name in scope._limits:
                        amount = min(amount, scope._limits[name])
                for scope in chain:
                    scope._committed[name] += amount

    def extend(self, more: Usage) -> None:
        """Raise the limits of this scope and of every scope enclosing it by ``more`` (a person's
        ``extend`` answer to ``ask_user``), so that the calls it allows are reserved and committed like
        any other. A limit that is off stays off; each scope's ``budget`` becomes the raised one."""
        with self._run.lock:
            for scope in self._chain():
                update: dict[str, float] = {}
                for name in LIMIT_NAMES:
                    amount, limit = getattr(more, name), getattr(scope.budget, name)
                    if amount and limit is not None:
                        raised = _exact(limit) + _exact(amount)  # exact, as totals are: 0.3 + 0.1 is 0.4
                        update[name] = int(raised) if name in COUNT_NAMES else float(raised)
                        if name in scope._limits:
                            scope._limits[name] = raised
                if update:
                    scope.budget = scope.budget.model_copy(update=update)

    # -- reading ----------------------------------------------------------------------------------

    def exhausted(self) -> Exhaustion | None:
        """The first spent limit (committed total at its limit, or wall time up) here or above."""
        with self._run.lock:
            now = self._run.clock()
            for scope in self._chain():
                spent = scope._spent(now)
                if spent is not None:
                    return spent
        return None

    def remaining(self) -> Budget:
        """What is left before each limit, the tightest of this scope and the run; ``None``: no limit."""
        with self._run.lock:
            now = self._run.clock()
            left: dict[str, float | None] = dict.fromkeys(LIMIT_NAMES)
            for scope in self._chain():
                for name in LIMIT_NAMES:
                    limit = getattr(scope.budget, name)
                    if limit is None:
                        continue
                    if name == "wall_s":
                        room: float = max(0.0, limit - scope._elapsed(now))
                    else:
                        exact = scope._limits[name] - scope._committed[name] - scope._reserved[name]
                        room = int(exact) if name in COUNT_NAMES else float(exact)
                    current = left[name]
                    left[name] = room if current is None else min(current, room)
        return Budget.model_validate(left)

    def used(self) -> Usage:
        """Committed totals at this scope, with the elapsed time as ``wall_s``."""
        with self._run.lock:
            return _usage(self._committed, wall_s=self._elapsed(self._run.clock()))

    def snapshot(self) -> LedgerSnapshot:
        """Used, reserved, limits and overrun by name, for a verdict's evidence and the decision log."""
        with self._run.lock:
            return self._snapshot(self._run.clock())

    def _snapshot(self, now: float) -> LedgerSnapshot:
        def floats(amounts: _Amounts, wall: float = 0.0) -> dict[str, float]:
            return {**{n: float(amounts[n]) for n in ADDITIVE_NAMES}, "wall_s": wall}

        return LedgerSnapshot(
            scope=self.scope,
            used=floats(self._committed, self._elapsed(now)),
            reserved=floats(self._reserved),
            limit=self.budget.limits(),
            overrun=floats(self._overrun),
            parent=None if self._parent is None else self._parent._snapshot(now),
        )


def _usage(amounts: Mapping[str, _Num], wall_s: float = 0.0) -> Usage:
    values: dict[str, float] = {
        n: int(amounts[n]) if n in COUNT_NAMES else float(amounts[n]) for n in ADDITIVE_NAMES
    }
    return Usage.model_validate({**values, "wall_s": wall_s})


class StepLedger(_Scope):
    """The ledger of one step inside a run; made by :meth:`Ledger.step`. Its usage counts in the run."""


class Ledger(_Scope):
    """The ledger of one run: ``Ledger(Budget(usd=2.0))``, then ``ledger.step("plan", budget=...)``.

    ``clock`` measures wall time (``time.monotonic`` by default; a ``ManualClock`` in tests).
    ``step_budget`` is the budget of a step opened without one (unlimited by default).
    """

    def __init__(
        self,
        budget: Budget | None = None,
        *,
        clock: Clock = monotonic,
        step_budget: Budget | None = None,
    ) -> None:
        super().__init__(budget or Budget(), _Run(clock), None, None)
        self.step_budget = step_budget or Budget()
        self._steps: dict[str, StepLedger] = {}

    def step(self, step_id: str, *, budget: Budget | None = None) -> StepLedger:
        """The step's ledger, opened on first use (a step revisited keeps its usage and its budget)."""
        with self._run.lock:
            existing = self._steps.get(step_id)
            if existing is not None:
                if budget is not None and budget != existing.budget:
                    raise ConfigError(
                        field="budget",
                        value=budget,
                        problem=f"step {step_id!r} is already open with budget {existing.budget!r}",
                    )
                return existing
            opened = StepLedger(budget or self.step_budget, self._run, self, step_id)
            self._steps[step_id] = opened
            return opened

    def steps(self) -> dict[str, StepLedger]:
        """The steps opened so far, by id."""
        with self._run.lock:
            return dict(self._steps)
