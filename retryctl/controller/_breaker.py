"""Circuit breakers keyed by tool or model, their state in a :class:`BreakerStore`.

The state machine, per key::

    closed ──(failure_threshold consecutive failures)──► open
    open ──(cooldown_s elapsed)──► half_open            (read lazily: no timer runs)
    half_open: admits at most half_open_max_calls probe calls
    half_open ──(success_threshold successes)──► closed
    half_open ──(any failure)──► open, with a fresh cool-down
    half_open ──(a probe released: its outcome says nothing of the key)──► the slot is free again

A probe that never reports back would hold its slot forever; so when every slot is taken and a whole
``cooldown_s`` has passed since the last probe was admitted, the unanswered probes are forgotten.
A success in ``closed`` resets the failure count; outcomes reported while ``open`` (calls admitted
before it opened) change nothing but the failure count.

Every transition is a pure function of (record, config, now) applied through the store's atomic
``update``, so processes sharing a :class:`SQLiteBreakerStore` never lose an update. The sync methods
are thread-safe; the ``a``-prefixed twins run them in a worker thread when the store may block (SQLite)
and inline otherwise (memory: microseconds), so they never stall an event loop.

A store can fail (Redis down, SQLite locked past its busy timeout). The plain methods then raise
:class:`~retryctl.exceptions.BreakerStoreError`; the drivers (the controlled step and tool node) use
:meth:`Breaker.admit`, :meth:`Breaker.report` and :meth:`Breaker.snapshot` instead, which never raise it:
they apply ``BreakerConfig.on_store_error`` (fail open: the call goes ahead unguarded; fail closed: it is
refused with the store's error, a transient fault) and return a :class:`StoreFault` to put in the
verdict's notes, so the decision is logged and the graph goes on.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Literal, ParamSpec, TypeVar

from pydantic import BaseModel, ConfigDict, Field, model_validator

from retryctl._log import get_logger
from retryctl.controller._breaker_store import (
    BreakerRecord,
    BreakerState,
    BreakerStore,
    MemoryBreakerStore,
)
from retryctl.controller._breaker_store import summary as _summary
from retryctl.controller._clock import Clock
from retryctl.controller._errors import Classification, ErrorClass
from retryctl.exceptions import BreakerOpen, BreakerStoreError

__all__ = ["Admission", "Breaker", "BreakerConfig", "StoreFault", "counts_against"]


def counts_against(error: Classification, exc: BaseException | None = None) -> bool:
    """Whether a failed call counts against its target's breaker: a transient or terminal fault of the
    target's own. A refusal (``exc`` an open breaker, or a store failing closed) is no failure of the
    target's, and a validation or semantic error is the caller's or the answer's, not the target's."""
    if isinstance(exc, BreakerOpen | BreakerStoreError):
        return False
    return error.error_class in (ErrorClass.TRANSIENT, ErrorClass.TERMINAL)


P = ParamSpec("P")
R = TypeVar("R")

_log = get_logger("retryctl.controller")

OnStoreError = Literal["fail_open", "fail_closed"]


class BreakerConfig(BaseModel):
    """When a breaker opens, how long it stays open, and how it closes again."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False, use_attribute_docstrings=True)

    failure_threshold: int = Field(default=5, ge=1)
    """Consecutive failures that open a closed breaker."""
    cooldown_s: float = Field(default=30.0, ge=0)
    """Seconds an open breaker refuses calls before it admits probes."""
    success_threshold: int = Field(default=1, ge=1)
    """Successful probes that close a half-open breaker."""
    half_open_max_calls: int = Field(default=1, ge=1)
    """Probe calls admitted per half-open window; at least ``success_threshold``."""
    on_store_error: OnStoreError = "fail_open"
    """What :meth:`Breaker.admit` does when the store cannot be reached: ``fail_open`` lets the call go
    ahead unguarded, ``fail_closed`` refuses it (a transient fault: the step retries, then switches).
    Fail open by default: the breaker protects a dependency from load, and an outage of the store that
    coordinates it should not stop every call of every worker; the step's budget still bounds what an
    unguarded call can cost. Choose ``fail_closed`` when calling a failing dependency does harm."""

    @model_validator(mode="after")
    def _can_close(self) -> BreakerConfig:
        if self.success_threshold > self.half_open_max_calls:
            raise ValueError(
                f"success_threshold={self.success_threshold} must be <= "
                f"half_open_max_calls={self.half_open_max_calls}, or a half-open breaker never closes"
            )
        return self


# -- the state machine: pure functions of (record, config, now) ----------------------------------


def _advance(rec: BreakerRecord, cfg: BreakerConfig, now: float) -> BreakerRecord:
    """Apply the time-driven transition: an open breaker whose cool-down ended is half-open."""
    if rec.state is BreakerState.OPEN and now >= (rec.opened_at or 0.0) + cfg.cooldown_s:
        return replace(rec, state=BreakerState.HALF_OPEN, probes=0, successes=0, last_probe_at=None)
    return rec


def _admit(rec: BreakerRecord, cfg: BreakerConfig, now: float) -> tuple[BreakerRecord, bool]:
    rec = _advance(rec, cfg, now)
    if rec.state is BreakerState.CLOSED:
        return rec, True
    if rec.state is BreakerState.OPEN:
        return rec, False
    if _stale(rec, cfg, now):
        rec = replace(rec, probes=rec.successes)
    if rec.probes < cfg.half_open_max_calls:
        return replace(rec, probes=rec.probes + 1, last_probe_at=now), True
    return rec, False


def _stale(rec: BreakerRecord, cfg: BreakerConfig, now: float) -> bool:
    return (
        rec.probes >= cfg.half_open_max_calls
        and rec.last_probe_at is not None
        and now >= rec.last_probe_at + cfg.cooldown_s
    )


def _succeed(rec: BreakerRecord, cfg: BreakerConfig, now: float) -> BreakerRecord:
    rec = _advance(rec, cfg, now)
    if rec.state is BreakerState.CLOSED:
        return replace(rec, failures=0)
    if rec.state is BreakerState.HALF_OPEN:
        if rec.successes + 1 >= cfg.success_threshold:
            return BreakerRecord()
        return replace(rec, successes=rec.successes + 1)
    return rec


def _fail(rec: BreakerRecord, cfg: BreakerConfig, now: float) -> BreakerRecord:
    rec = _advance(rec, cfg, now)
    failures = rec.failures + 1
    if rec.state is BreakerState.OPEN:
        return replace(rec, failures=failures)
    if rec.state is BreakerState.CLOSED and failures < cfg.failure_threshold:
        return replace(rec, failures=failures)
    return BreakerRecord(state=BreakerState.OPEN, failures=failures, opened_at=now)


def _release(rec: BreakerRecord, cfg: BreakerConfig, now: float) -> BreakerRecord:
    rec = _advance(rec, cfg, now)
    if rec.state is BreakerState.HALF_OPEN and rec.probes > rec.successes:
        return replace(rec, probes=rec.probes - 1)
    return rec


def _retry_at(rec: BreakerRecord, cfg: BreakerConfig) -> float:
    if rec.state is BreakerState.HALF_OPEN:
        return (rec.last_probe_at or 0.0) + cfg.cooldown_s
    return (rec.opened_at or 0.0) + cfg.cooldown_s


# -- what a driver gets back when the store fails ----------------------------------------------------


@dataclass(frozen=True, slots=True)
class StoreFault:
    """The breaker's store failed during ``operation`` on ``key``, and what the breaker did instead."""

    key: str | None
    """The key concerned (``None`` for a read of every key)."""
    operation: str
    """``admit``, ``record_success``, ``record_failure``, ``release`` or ``states``."""
    error: BreakerStoreError
    """The store's error."""
    decision: str
    """What happened instead, for a person (e.g. ``fail_open: the call goes ahead unguarded``)."""

    def __str__(self) -> str:
        on = f" for {self.key!r}" if self.key is not None else ""
        return f"breaker store unreachable during {self.operation}{on} ({self.error}); {self.decision}"


@dataclass(frozen=True, slots=True)
class Admission:
    """Whether a call may go ahead: :meth:`Breaker.admit`'s answer."""

    refused: BreakerOpen | BreakerStoreError | None = None
    """Why the call may not go ahead: the key's breaker is open, or the store failed and the breaker
    fails closed; ``None`` when it may."""
    fault: StoreFault | None = None
    """The store's failure and the decision taken on it, when the store failed."""
    probe: bool = False
    """Whether the call took a half-open probe slot: its outcome must be reported, or the slot given
    back with :meth:`Breaker.release` when the outcome says nothing of the key's health."""

    @property
    def allowed(self) -> bool:
        """Whether the call may go ahead."""
        return self.refused is None


def _as_store_error(breaker: Breaker, operation: str, exc: Exception) -> BreakerStoreError:
    # A store of the user's own may raise its driver's errors: name the store and keep the cause.
    if isinstance(exc, BreakerStoreError):
        return exc
    error = BreakerStoreError(store=type(breaker.store).__name__, operation=operation, problem=_summary(exc))
    error.__cause__ = exc
    return error


# -- the driver ------------------------------------------------------------------------------------


class Breaker:
    """Circuit breakers for many keys (tool or model names) with one config and one store.

    ``store`` defaults to a :class:`MemoryBreakerStore`; ``clock`` to the store's default clock
    (monotonic in memory, wall time in SQLite, whose state outlives the process).
    """

    def __init__(
        self,
        config: BreakerConfig | None = None,
        *,
        store: BreakerStore | None = None,
        clock: Clock | None = None,
    ) -> None:
        self.config = config or BreakerConfig()
        self.store: BreakerStore = store if store is not None else MemoryBreakerStore()
        self.clock: Clock = clock if clock is not None else self.store.default_clock

    def allow(self, key: str) -> bool:
        """Whether a call to ``key`` may go ahead now; in half-open this takes a probe slot."""
        cfg, now = self.config, self.clock()
        return self.store.update(key, lambda rec: _admit(rec, cfg, now))

    def before_call(self, key: str) -> None:
        """Like :meth:`allow`, but a refusal raises :class:`~retryctl.exceptions.BreakerOpen`."""
        self._enter(key)

    def _enter(self, key: str) -> bool:
        """:meth:`before_call`, returning whether the call took a half-open probe slot."""
        cfg, now = self.config, self.clock()

        def admit(rec: BreakerRecord) -> tuple[BreakerRecord, tuple[BreakerRecord | None, bool]]:
            new, allowed = _admit(rec, cfg, now)
            return new, (None if allowed else new, allowed and new.state is BreakerState.HALF_OPEN)

        refused, probe = self.store.update(key, admit)
        if refused is not None:
            retry_at = _retry_at(refused, cfg)
            raise BreakerOpen(
                key=key, retry_at=retry_at, failures=refused.failures, wait_s=max(0.0, retry_at - now)
            )
        return probe

    def record_success(self, key: str) -> BreakerState:
        """Report a successful call to ``key``; returns the state after it."""
        return self._record(key, _succeed)

    def record_failure(self, key: str) -> BreakerState:
        """Report a failed call to ``key``; returns the state after it."""
        return self._record(key, _fail)

    def _record(
        self, key: str, step: Callable[[BreakerRecord, BreakerConfig, float], BreakerRecord]
    ) -> BreakerState:
        cfg, now = self.config, self.clock()

        def apply(rec: BreakerRecord) -> tuple[BreakerRecord, BreakerState]:
            new = step(rec, cfg, now)
            return new, new.state

        return self.store.update(key, apply)

    def record(self, key: str) -> BreakerRecord:
        """``key``'s record as of now (cool-down applied), without changing it."""
        return _advance(self.store.get(key), self.config, self.clock())

    def state(self, key: str) -> BreakerState:
        """``key``'s state now: ``closed`` for a key never seen."""
        return self.record(key).state

    def retry_at(self, key: str) -> float | None:
        """When ``key`` admits a call again, on the breaker's clock; ``None`` if it admits one now."""
        rec = self.record(key)
        now = self.clock()
        if rec.state is BreakerState.CLOSED:
            return None
        if rec.state is BreakerState.HALF_OPEN and (
            rec.probes < self.config.half_open_max_calls or _stale(rec, self.config, now)
        ):
            return None
        return _retry_at(rec, self.config)

    def states(self) -> dict[str, str]:
        """Every known key's state, as the verdict's evidence wants it: ``{key: "open"}``."""
        now = self.clock()
        return {
            key: _advance(rec, self.config, now).state.value
            for key, rec in sorted(self.store.items().items())
        }

    def reset(self, key: str | None = None) -> None:
        """Close ``key``'s breaker (or every breaker) and forget its failures."""
        self.store.reset(key)

    # -- for drivers: the same steps, with a failing store decided on instead of raised ------------

    def _fault(self, key: str | None, operation: str, exc: Exception, decision: str) -> StoreFault:
        fault = StoreFault(
            key=key, operation=operation, error=_as_store_error(self, operation, exc), decision=decision
        )
        _log.warning("breaker.store_error", key=key, operation=operation, error=str(fault.error))
        return fault

    def admit(self, key: str) -> Admission:
        """Like :meth:`before_call`, as data: an open breaker refuses; a failing store is decided on by
        ``config.on_store_error``. Never raises a store's error."""
        try:
            probe = self._enter(key)
        except BreakerOpen as refused:
            return Admission(refused=refused)
        except Exception as exc:  # any store failure: the store is outside the controller's control
            if self.config.on_store_error == "fail_closed":
                fault = self._fault(key, "admit", exc, f"fail_closed: the call to {key!r} is refused")
                return Admission(refused=fault.error, fault=fault)
            fault = self._fault(key, "admit", exc, f"fail_open: the call to {key!r} goes ahead unguarded")
            return Admission(fault=fault)
        return Admission(probe=probe)

    def release(self, key: str) -> StoreFault | None:
        """Give back a half-open probe slot taken by a call whose outcome says nothing of ``key``'s
        health (a request the target refused for its own content): the next call probes instead, and
        the breaker neither closes nor opens on it. A no-op in ``closed`` and ``open``; a failing store
        is returned as a :class:`StoreFault`, never raised."""
        try:
            self._record(key, _release)
        except Exception as exc:
            return self._fault(key, "release", exc, "the probe slot is held until it goes stale")
        return None

    def report(self, key: str, *, failed: bool) -> StoreFault | None:
        """Record a call's outcome (:meth:`record_failure` or :meth:`record_success`); a failing store
        is returned as a :class:`StoreFault` (the outcome is not counted), never raised."""
        operation = "record_failure" if failed else "record_success"
        try:
            self._record(key, _fail if failed else _succeed)
        except Exception as exc:
            outcome = "failure" if failed else "success"
            return self._fault(key, operation, exc, f"the {outcome} is not counted")
        return None

    def snapshot(self) -> tuple[dict[str, str], StoreFault | None]:
        """:meth:`states` for a verdict's evidence; with a failing store, no states and the fault."""
        try:
            return self.states(), None
        except Exception as exc:
            return {}, self._fault(None, "states", exc, "breaker states unknown")

    # -- async twins: the same methods, off the event loop when the store may block ------------

    async def _call(self, fn: Callable[P, R], *args: P.args, **kwargs: P.kwargs) -> R:
        if self.store.blocking:
            return await asyncio.to_thread(fn, *args, **kwargs)
        return fn(*args, **kwargs)

    async def aallow(self, key: str) -> bool:
        """Async :meth:`allow`."""
        return await self._call(self.allow, key)

    async def abefore_call(self, key: str) -> None:
        """Async :meth:`before_call`."""
        await self._call(self.before_call, key)

    async def arecord_success(self, key: str) -> BreakerState:
        """Async :meth:`record_success`."""
        return await self._call(self.record_success, key)

    async def arecord_failure(self, key: str) -> BreakerState:
        """Async :meth:`record_failure`."""
        return await self._call(self.record_failure, key)

    async def astate(self, key: str) -> BreakerState:
        """Async :meth:`state`."""
        return await self._call(self.state, key)

    async def astates(self) -> dict[str, str]:
        """Async :meth:`states`."""
        return await self._call(self.states)
