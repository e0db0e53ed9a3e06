"""Step spans held open across the nodes of a LangGraph step (:class:`~retryctl.nodes.ControlledStep`).

A controlled step is a subgraph (act, assess, decide, ... as separate nodes), so no block of code spans
it and its span cannot be a ``with``. Its span is opened instead when its first verdict is recorded,
started back at that attempt's start, kept here by ``(run id, step id)``, made the parent of each
attempt span, and ended by the step's terminal verdict: ``accept``, ``stop`` or ``ask_user``.

An ``ask_user`` ends the span (the step pauses: an ``interrupt()`` may wait for days, and a span left
open that long would never be exported); the answer, recorded when the step resumes, opens a new step
span with a Link to the asked one (the link is made when the resume runs in the same process: the
asked span's context is kept here, not in the checkpoint). A step that never ends (its graph raised,
its run was abandoned) is not leaked: past :data:`MAX_OPEN` open steps the oldest is ended with
``retryctl.step.unfinished = "evicted"``, and a step started again on the same key ends the old span
with ``"restarted"``.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Any

from retryctl.telemetry import _api
from retryctl.telemetry import names as n

__all__ = ["MAX_OPEN", "TERMINAL", "HeldSteps"]

MAX_OPEN = 1024
"""The most step spans held open at once by one driver; beyond it the oldest is ended."""
TERMINAL = frozenset({"accept", "stop", "ask_user"})
"""The verdicts that end a held step span."""

Key = tuple[str | None, str]


class _Held:
    """One open step span, and the attempt a switch moved away from (the next attempt links to it)."""

    __slots__ = ("context", "link", "span")

    def __init__(self, span: Any) -> None:
        self.span = span
        self.context = _api.trace.set_span_in_context(span)
        """The parent context of the step's attempt spans."""
        self.link: Any = None


class HeldSteps:
    """The step spans of one driver held open between verdicts (see the module docstring)."""

    __slots__ = ("_asked", "_lock", "_open")

    def __init__(self) -> None:
        self._open: OrderedDict[Key, _Held] = OrderedDict()
        self._asked: OrderedDict[Key, Any] = OrderedDict()
        # A batch runs steps in threads as well as tasks: the table is shared by all of them.
        self._lock = threading.Lock()

    def get(self, tracer: Any, key: Key, *, start_time: int) -> _Held:
        """The open span of ``key``, or a new ``retryctl.step <step id>`` started at ``start_time``, a
        child of the current span, linked to the span that asked the user when this resumes it."""
        with self._lock:
            held = self._open.get(key)
            if held is not None:
                return held
            asked = self._asked.pop(key, None)
            links = [_api.trace.Link(asked)] if asked is not None else None
            attrs = {n.KIND: "model", n.STEP_ID: key[1]} | ({n.RUN_ID: key[0]} if key[0] is not None else {})
            span = tracer.start_span(
                f"{n.SPAN_STEP} {key[1]}", attributes=attrs, links=links, start_time=start_time
            )
            held = self._open[key] = _Held(span)
            evicted = self._open.popitem(last=False)[1] if len(self._open) > MAX_OPEN else None
        if evicted is not None:
            _unfinished(evicted, "evicted")
        return held

    def end(self, key: Key, action: str) -> None:
        """End the span of ``key`` after its terminal verdict ``action`` (an ``ask_user`` is kept to be
        linked from the span of the resumed step)."""
        with self._lock:
            held = self._open.pop(key, None)
            if held is None:
                return
            if action == "ask_user":
                self._asked[key] = held.span.get_span_context()
                while len(self._asked) > MAX_OPEN:
                    self._asked.popitem(last=False)
        held.span.end()

    def restart(self, key: Key) -> None:
        """A step starts afresh on ``key`` (new input): an open span of it ends as ``restarted``, and the
        answer to an earlier question is no longer awaited."""
        if not self._open and not self._asked:
            return  # the common case, without the lock
        with self._lock:
            held = self._open.pop(key, None)
            self._asked.pop(key, None)
        if held is not None:
            _unfinished(held, "restarted")


def _unfinished(held: _Held, why: str) -> None:
    held.span.set_attribute(n.STEP_UNFINISHED, why)
    held.span.end()
