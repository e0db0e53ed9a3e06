"""A batch's turn: one batch task at a time runs its CPU work, in FIFO order, from one wait to the next.

Why. A batch runs many graphs on one event loop. Between "the model answered" and "the next request is
sent" a task does a few milliseconds of CPU work (LangGraph, the controller, the decision log), made of
many ``await`` points, because LangGraph runs nodes as tasks and futures. asyncio serves ready callbacks
first in, first out, so when the answers of many tasks arrive together (a server with steady latency)
the tasks advance round-robin, one slice each, in lock-step: every one of them sends its next request
only when the whole group's CPU work is done. The group stays together for the rest of the batch (a
"wave"), and each wave takes ``latency + tasks x cpu_per_task`` instead of ``latency`` plus one task's
CPU: at 64 tasks, 1 s latency and 5.5 ms of CPU per task, about 74 % of ideal
(``bench/batch_throughput.py``). Breaking the first wave up (staggered starts) does not last: tasks
whose CPU work overlaps finish together and the waves form again.

What. :func:`~retryctl.batch.run_batch` gives each task a :class:`Ticket` of one :class:`Turn`, through
a context variable, and the task holds the turn from its start until it starts an external wait, and
again from the end of that wait: the drivers give it up with :func:`yielded_turn` at their awaits, and
only there: the sampling driver around each draw (:func:`~retryctl.nodes._sampling.run_async`, which
covers a backend's requests and its transport retries' sleeps), the tool node around each tool call,
the step around its verifier thread and backoff sleep, the batch runner around its retry sleeps. The
controller, the models and the sandbox never import this module (``tests/test_layers.py``): the waits
inside them run inside one of those awaits, and a graph that awaits them directly (``averify``, a
backend's ``sample``) wraps that await itself. Waiters queue first in, first out, so a task that got its
answer runs until its next request is out before the next task runs (run-to-completion between waits), the
requests leave one task's CPU work apart, and the answers come back spread out the same way: the CPU
work overlaps the waiting instead of piling up behind it. A task that ends hands its turn straight to
the task the runner starts in its place (:meth:`Turn.ticket`), so one task's last piece of work and the
next one's first run as one. Outside a batch, :func:`yielded_turn` is a no-op costing one
context-variable lookup.

Soft. A user's graph (``retryctl batch --graph``) may await its own I/O while it holds the turn, which
the library cannot see. So no waiter waits for ever: when one holder keeps the turn for
:data:`OVERSTAY_S` while others wait, the turn checks what the event loop's thread did meanwhile. If it
mostly waited (less than :data:`BUSY_FRACTION` of the time on the CPU), the holder is not computing but
waiting for something hidden, which the graph's other tasks most likely do too: the turn switches
itself off for the rest of the batch, releasing every waiter (plain round-robin, as without the turn,
for the cost of one ``OVERSTAY_S``). If the thread was busy (a long node, a garbage collection), the
holder keeps running but loses the turn to the next waiter. Task ends, exceptions, ``interrupt()`` and
cancellation all give the turn back (:meth:`Turn.hold` releases it in a ``finally``).

Why hand-written. ``asyncio.Lock`` is FIFO, but it knows nothing of which batch task a wait in one of
LangGraph's child tasks belongs to, has no reentrancy for a task's gathered requests, cannot hand over
to a successor ahead of its queue, and never gives up on a holder; Python 3.12's eager task factory
runs only a task's first step eagerly (and this project runs on 3.11); neither anyio, tenacity nor
LangGraph schedules tasks. The turn is tracked per batch task (its :class:`Ticket`, which
LangGraph's child tasks inherit through the context), not per ``asyncio`` task, and nested or
concurrent waits of one task (k requests gathered at once) give it up once and take it back once.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager, nullcontext
from contextvars import ContextVar
from types import TracebackType
from typing import ParamSpec, TypeVar

__all__ = ["BUSY_FRACTION", "OVERSTAY_S", "Ticket", "Turn", "yielded_turn", "yielding"]

P = ParamSpec("P")
T = TypeVar("T")

OVERSTAY_S = 0.05
"""How long one holder may keep the turn while others wait before the turn checks on it.

Fifty milliseconds is several times the longest the demo agent holds the turn (3-7 ms at a time, 99th
percentile 8 ms, on the shared 2-core machine; the only longer holds seen were CPython's full garbage
collections, 0.1-0.15 s, which count as busy), so a holder that is computing is seldom cut short; and
it is a twentieth of a 1 s model call (a quarter of a 200 ms one), so a graph that awaits its own I/O
while holding the turn costs the batch that much once, before the turn switches off."""

BUSY_FRACTION = 0.5
"""Below this share of :data:`OVERSTAY_S` spent on the CPU, the loop was waiting, not computing.

A holder that is computing keeps the loop's thread on the CPU for the whole window (close to 1 on an
idle machine, and above one half unless more than one other busy process competes for each core); the
loop can only sit in ``select`` while the holder awaits something outside the loop."""

_TICKET: ContextVar[Ticket | None] = ContextVar("retryctl_turn_ticket", default=None)


class Ticket:
    """One batch task's place in a :class:`Turn`, shared by the child tasks LangGraph creates for it."""

    __slots__ = ("acquiring", "done", "held", "out", "turn")

    def __init__(self, turn: Turn) -> None:
        self.turn = turn
        self.held = False
        """Whether this task holds the turn now."""
        self.out = 0
        """External waits of this task in progress (several when it gathers requests)."""
        self.acquiring = False
        """Whether one of its waits is taking the turn back."""
        self.done = False
        """Whether the task has ended (a late child wait must not take the turn again)."""


class Turn:
    """A soft FIFO turn shared by the tasks of one batch, on the running event loop (see the module)."""

    def __init__(self, *, overstay_s: float = OVERSTAY_S, busy_fraction: float = BUSY_FRACTION) -> None:
        self.overstay_s = overstay_s
        self.busy_fraction = busy_fraction
        self.off = False
        """Whether the turn switched itself off (every task then runs as if there were none)."""
        self.off_reason: str | None = None
        """Why it did."""
        self.preempted = 0
        """Holders that lost the turn for keeping it too long while the loop was busy."""
        self.grants = 0
        """Times the turn was taken."""
        self._loop = asyncio.get_running_loop()
        self._holder: Ticket | None = None
        self._waiters: deque[tuple[Ticket, asyncio.Future[None]]] = deque()
        self._window = (-1, 0.0, 0.0)  # (grant number, loop time, thread CPU time) the wait began at
        self._timer: asyncio.TimerHandle | None = None

    def ticket(self, *, after: Ticket | None = None) -> Ticket:
        """A new batch task's ticket. With ``after`` (a task about to end, whose place the new task
        takes), the new task gets ``after``'s turn directly, ahead of the queue: one task's last piece of
        work and its successor's first one then run as one, and the successor's first request leaves
        without waiting behind every answer that arrived meanwhile."""
        ticket = Ticket(self)
        if after is not None and self._holder is after and not self.off:
            after.held = False
            self._grant(ticket)
            if self._waiters:
                self._watch()
        return ticket

    @asynccontextmanager
    async def hold(self, ticket: Ticket | None = None) -> AsyncIterator[Ticket]:
        """Run the body as one batch task (with ``ticket``, from :meth:`ticket`): it takes the turn
        now, unless its ticket holds it already, and gives it up for good at the end."""
        ticket = ticket or Ticket(self)
        token = _TICKET.set(ticket)
        try:
            await self.acquire(ticket)
            yield ticket
        finally:
            ticket.done = True
            self.release(ticket)
            _TICKET.reset(token)

    async def acquire(self, ticket: Ticket) -> None:
        """Wait (first in, first out) until ``ticket`` holds the turn, or the turn is off."""
        if self.off or ticket.done or ticket.held:
            return
        if self._holder is None and not self._waiters:
            self._grant(ticket)
            return
        waiter = self._loop.create_future()
        self._waiters.append((ticket, waiter))
        self._watch()
        try:
            await waiter
        except asyncio.CancelledError:
            if waiter.cancelled():
                # Not granted: leave the queue (a grant skips it meanwhile, being done).
                if (ticket, waiter) in self._waiters:
                    self._waiters.remove((ticket, waiter))
            else:
                # Granted just as the task was cancelled: pass the turn on.
                self.release(ticket)
            raise

    def release(self, ticket: Ticket) -> None:
        """Give the turn up if ``ticket`` holds it; the next waiter takes it."""
        if self._holder is not ticket:
            ticket.held = False
            return
        ticket.held = False
        self._holder = None
        self._grant_next()

    def _grant(self, ticket: Ticket) -> None:
        self._holder = ticket
        ticket.held = True
        self.grants += 1

    def _grant_next(self) -> None:
        while self._waiters:
            ticket, waiter = self._waiters.popleft()
            if waiter.done():  # cancelled while queued
                continue
            self._grant(ticket)
            waiter.set_result(None)
            break
        if self._waiters:
            self._watch()

    def _watch(self) -> None:
        """Start timing the current holder (once per grant) and make sure a check is due."""
        if self._window[0] != self.grants:
            self._window = (self.grants, self._loop.time(), time.thread_time())
        if self._timer is None:
            self._timer = self._loop.call_at(self._window[1] + self.overstay_s, self._check)

    def _check(self) -> None:
        self._timer = None
        if self.off or self._holder is None or not any(not w.done() for _, w in self._waiters):
            return
        _, began, cpu = self._window
        now = self._loop.time()
        if now < began + self.overstay_s:  # the turn changed hands since: time the new holder
            self._timer = self._loop.call_at(began + self.overstay_s, self._check)
            return
        busy = (time.thread_time() - cpu) / max(now - began, 1e-9)
        if busy < self.busy_fraction:
            self._switch_off(
                f"a task held the turn for {now - began:.3f} s while the event loop was idle "
                f"({busy:.0%} on the CPU): the graph awaits something outside the library's waits"
            )
            return
        self.preempted += 1
        self._holder.held = False
        self._holder = None
        self._grant_next()

    def _switch_off(self, reason: str) -> None:
        self.off = True
        self.off_reason = reason
        if self._holder is not None:
            self._holder.held = False
            self._holder = None
        waiters, self._waiters = self._waiters, deque()
        for _, waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)


_NO_TURN: AbstractAsyncContextManager[None] = nullcontext()
""":func:`yielded_turn` outside a batch, or with the turn off: nothing to give up (reusable)."""


class _Yielded:
    """Give the turn up for the body (an external wait) and take it back after it."""

    __slots__ = ("ticket",)

    def __init__(self, ticket: Ticket) -> None:
        self.ticket = ticket

    async def __aenter__(self) -> None:
        ticket = self.ticket
        ticket.out += 1
        if ticket.out == 1 and ticket.held:
            ticket.turn.release(ticket)

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        ticket = self.ticket
        ticket.out -= 1
        # Another wait of the same task (gathered requests) still running, or already taking the turn
        # back: the last one to end takes it. A cancelled task runs its clean-up without it.
        if ticket.out or ticket.held or ticket.done or ticket.acquiring:
            return
        if exc_type is not None and issubclass(exc_type, asyncio.CancelledError):
            return
        ticket.acquiring = True
        try:
            await ticket.turn.acquire(ticket)
        finally:
            ticket.acquiring = False
        if ticket.out and ticket.held:  # a sibling wait began meanwhile
            ticket.turn.release(ticket)


def yielded_turn() -> AbstractAsyncContextManager[None]:
    """``async with yielded_turn(): await <external wait>``: let the batch's next task run meanwhile.

    Wrap every wait for something outside the event loop's CPU work (a model or HTTP call, a tool, a
    thread, a sleep). Outside a batch (or on another thread's event loop) it does nothing.
    """
    ticket = _TICKET.get()
    if ticket is None or ticket.turn.off or ticket.turn._loop is not asyncio.get_running_loop():
        return _NO_TURN
    return _Yielded(ticket)


def yielding(wait: Callable[P, Awaitable[T]]) -> Callable[P, Awaitable[T]]:
    """``wait`` (e.g. ``asyncio.sleep`` given to tenacity) run inside :func:`yielded_turn`."""

    async def waiting(*args: P.args, **kwargs: P.kwargs) -> T:
        async with yielded_turn():
            return await wait(*args, **kwargs)

    return waiting
