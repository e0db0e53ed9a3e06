"""``Tracing``: the spans of wrapped steps and tool calls, their attempts, and each verdict as an event.

One object per driver, holding the ``tracer_provider`` it was given (or none: the application's global
provider, read at each span, so a provider set after the driver was built is used). Three pieces:

- :meth:`Tracing.step` opens ``retryctl.step <name>`` or ``retryctl.tool <name>`` as the current span
  (a context manager over ``contextvars``: LangChain's and LangGraph's calls inside it, sync or async,
  are its children) and makes it the *scope* its attempts and verdicts belong to;
- :meth:`Tracing.attempt` opens one attempt as the current span, a child of the scope, named for its
  target (the model or tool); after a ``switch`` it carries a Link to the attempt switched away from;
- :meth:`Tracing.verdict`, called where the verdict is recorded (:class:`~retryctl.nodes.Emitter`, the
  gateway), writes the verdict on the attempt span that is open for it; a driver whose attempts are not
  a block of code (a LangGraph step across nodes, the middleware's model-call flow) gets the attempt
  span made then, started back at the attempt's start (now minus its latency) and ended at once.

A driver whose *step* is not a block of code either (:class:`~retryctl.nodes.ControlledStep`, built with
``held_steps=True``) has its step span held open between verdicts (:mod:`retryctl.telemetry._held`):
opened at the first, the parent of every attempt span, ended at the terminal one.

When nothing records (the ``otel`` extra missing, or no provider given and none set globally), each of
them returns at once: :meth:`Tracing.tracer` is ``None`` and the context managers are one shared no-op.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from contextvars import ContextVar, Token
from typing import TYPE_CHECKING, Any

from retryctl.telemetry import _api
from retryctl.telemetry import names as n
from retryctl.telemetry._attrs import (
    attempt_attributes,
    call_attributes,
    evaluation_attributes,
    verdict_attributes,
)
from retryctl.telemetry._held import TERMINAL, HeldSteps

if TYPE_CHECKING:
    from types import TracebackType

    from retryctl.controller import Verdict

__all__ = ["NO_TRACING", "Tracing", "held_ends", "incoming_context"]

_VERSION = "0.1.0"  # retryctl.__version__, not imported: this module stays below the top-level package
_NOTHING: AbstractContextManager[None] = nullcontext()
"""The one context manager every span method returns when nothing records (reusable: it holds nothing)."""


class _Scope:
    """A step or tool span in progress, and what its next attempt needs to know."""

    __slots__ = ("kind", "link", "live", "live_attempt", "live_judged", "span")

    def __init__(self, span: Any, kind: str) -> None:
        self.span = span
        self.kind = kind
        self.link: Any = None
        """The span context of an attempt switched away from: the next attempt links to it."""
        self.live: Any = None
        """The attempt span open now (:meth:`Tracing.attempt`), if any."""
        self.live_attempt = 0
        self.live_judged = False
        """Whether a verdict was written on the live attempt (it said whether the call was made)."""


_SCOPE: ContextVar[_Scope | None] = ContextVar("retryctl_trace_scope", default=None)
_ENDS: ContextVar[list[Callable[[], None]] | None] = ContextVar("retryctl_span_ends", default=None)
"""The span ends held back by :class:`held_ends` in progress (the calls of a node pass, copied into
the pool's threads with the context, append to the list of the pass that started them)."""


def _end(span: Any) -> None:
    """End ``span`` now, or at its own end time when the :class:`held_ends` block in progress ends."""
    held = _ENDS.get()
    if held is None:
        span.end()
        return
    end = time.time_ns()
    held.append(lambda: span.end(end_time=end))


class held_ends:  # lower case: used as a function, ``with held_ends():``
    """The spans of retryctl that end inside the block stay open until the block ends, then end at the
    times they would have: what is written on them in between (a decision-log record's hash, written
    when a tool node's pass ends) is still taken. Exported at the block's end."""

    __slots__ = ("_ends", "_token")

    def __enter__(self) -> None:
        self._ends: list[Callable[[], None]] = []
        self._token = _ENDS.set(self._ends)

    def __exit__(self, *_: object) -> None:
        _ENDS.reset(self._token)
        for end in self._ends:
            end()


def _is_control_flow(exc: BaseException) -> bool:
    # LangGraph's interrupts and Command bubbling (GraphBubbleUp) are exceptions that are not failures:
    # named, not imported, so that this package does not import LangGraph.
    return any(c.__name__ == "GraphBubbleUp" for c in type(exc).__mro__)


class _Span:
    """A span made current for a block, as the scope of attempts (``kind`` given) or plain."""

    __slots__ = ("_scope_token", "_span", "_token", "_tracer", "attrs", "context", "kind", "links", "name")

    def __init__(
        self,
        tracer: Any,
        name: str,
        attrs: dict[str, Any],
        *,
        kind: str | None = None,
        context: Any = None,
        links: Any = None,
    ) -> None:
        self._tracer = tracer
        self.name = name
        self.attrs = attrs
        self.kind = kind
        self.context = context
        self.links = links

    def __enter__(self) -> None:
        span = self._tracer.start_span(
            self.name, context=self.context, attributes=self.attrs, links=self.links
        )
        self._span = span
        self._token = _api.context.attach(_api.trace.set_span_in_context(span, self.context))
        self._scope_token: Token[_Scope | None] | None = (
            _SCOPE.set(_Scope(span, self.kind)) if self.kind is not None else None
        )

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        span = self._span
        if exc is not None and not _is_control_flow(exc) and span.is_recording():
            span.record_exception(exc)
            span.set_status(_api.trace.Status(_api.trace.StatusCode.ERROR, f"{type(exc).__name__}: {exc}"))
        if self._scope_token is not None:
            _SCOPE.reset(self._scope_token)
        _api.context.detach(self._token)
        _end(span)


class _Attempt(_Span):
    """An attempt span: current for the block, and the scope's live attempt while it is open."""

    __slots__ = ("_number", "_scope")

    def __init__(self, tracer: Any, scope: _Scope, target: str, number: int) -> None:
        links = [_api.trace.Link(scope.link)] if scope.link is not None else None
        super().__init__(tracer, target, attempt_attributes(number), links=links)
        self._scope = scope
        self._number = number

    def __enter__(self) -> None:
        super().__enter__()
        scope = self._scope
        scope.live, scope.live_attempt, scope.live_judged = self._span, self._number, False

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        scope = self._scope
        if not scope.live_judged and self._span.is_recording():
            # Left with no verdict (an interrupt or a cancellation out of the call): the call ran.
            self._span.set_attributes(call_attributes(scope.kind, self.name, call_made=True))
        scope.live = None
        super().__exit__(exc_type, exc, tb)


class Tracing:
    """Spans of one driver through ``tracer_provider``, or through the application's global provider
    when it is ``None`` (retryctl never sets one). See the module docstring."""

    __slots__ = ("_held", "steps", "tracer_provider")

    def __init__(self, tracer_provider: Any = None, *, held_steps: bool = False) -> None:
        self.tracer_provider = tracer_provider
        """The provider given, or ``None``: the global one."""
        self._held: tuple[Any, Any] | None = None
        self.steps = HeldSteps() if held_steps else None
        """With ``held_steps`` (a driver whose step spans several LangGraph nodes): the step spans held
        open between its verdicts (:mod:`retryctl.telemetry._held`); ``None`` otherwise."""

    def tracer(self) -> Any:
        """The ``retryctl`` tracer of the provider in force, or ``None`` when nothing would record (the
        ``otel`` extra missing, or no provider given and none set globally)."""
        trace = _api.trace
        if trace is None:
            return None
        provider = self.tracer_provider
        if provider is None:
            if _api.GLOBAL_READABLE and trace._TRACER_PROVIDER is None:
                # The API's global, read without get_tracer_provider()'s os.environ lookup: this runs
                # on every verdict of an application that does not trace.
                return None
            provider = trace.get_tracer_provider()
            if type(provider) is _api.UNSET_PROVIDER:
                return None
        held = self._held
        if held is not None and held[0] is provider:
            return held[1]
        tracer = trace.get_tracer(n.TRACER_NAME, _VERSION, tracer_provider=provider)
        self._held = (provider, tracer)
        return tracer

    @property
    def active(self) -> bool:
        """Whether spans are made now (a driver skips building what only a span would read)."""
        return self.tracer() is not None

    def step(
        self, name: str, *, kind: str = "model", attributes: dict[str, Any] | None = None, context: Any = None
    ) -> AbstractContextManager[None]:
        """``retryctl.step <name>`` (``kind="model"``) or ``retryctl.tool <name>`` (``"tool"``), current
        for the block and the scope of the attempts in it; ``context``: the parent (an incoming trace,
        :func:`incoming_context`), else the current span."""
        tracer = self.tracer()
        if tracer is None:
            return _NOTHING
        prefix = n.SPAN_TOOL if kind == "tool" else n.SPAN_STEP
        attrs = {n.KIND: kind, **(attributes or {})}
        return _Span(tracer, f"{prefix} {name}", attrs, kind=kind, context=context)

    def span(self, name: str, attributes: dict[str, Any] | None = None) -> AbstractContextManager[None]:
        """A plain span current for the block (a batch, one of its tasks)."""
        tracer = self.tracer()
        if tracer is None:
            return _NOTHING
        return _Span(tracer, name, dict(attributes or {}))

    def attempt(self, target: str, number: int) -> AbstractContextManager[None]:
        """Attempt ``number`` on ``target`` as the current span for the block, a child of the step or
        tool span in progress (nothing outside one)."""
        tracer = self.tracer()
        scope = _SCOPE.get()
        if tracer is None or scope is None:
            return _NOTHING
        return _Attempt(tracer, scope, target, number)

    def verdict(
        self,
        verdict: Verdict,
        *,
        attempt: int,
        target: str | None,
        step_id: str,
        run_id: str | None,
        latency_ms: float,
        record_hash: str | None = None,
        call_made: bool = True,
    ) -> Any:
        """Write ``verdict`` on the span of attempt ``attempt``: the open one, or one made now (see the
        module docstring). ``record_hash``: the decision-log record's hash, when it was written.
        ``call_made``: ``False`` when the attempt called nothing (a breaker or a budget refused the call,
        a person's reply decided): its span then carries no GenAI call attributes and is no error.
        Returns the span written on (``None`` when nothing records)."""
        tracer = self.tracer()
        if tracer is None:
            return None
        name = target or step_id
        start = time.time_ns() - int(max(0.0, latency_ms) * 1e6)
        held = None
        if self.steps is not None:  # a step across nodes: its span is held, never the current scope
            scope, key = None, (run_id, step_id)
            held = self.steps.get(tracer, key, start_time=start)
        else:
            scope = _SCOPE.get()
        kind = scope.kind if scope is not None else "model"
        if scope is not None and scope.live is not None and scope.live_attempt == attempt:
            span, made = scope.live, False
            scope.live_judged = True
        else:
            switched = held.link if held is not None else scope.link if scope is not None else None
            links = [_api.trace.Link(switched)] if switched is not None else None
            attrs = attempt_attributes(attempt)
            parent = held.context if held is not None else None
            span = tracer.start_span(name, context=parent, attributes=attrs, links=links, start_time=start)
            made = True
        if span.is_recording():
            attrs = call_attributes(kind, name, call_made=call_made)
            attrs |= verdict_attributes(verdict, record_hash=record_hash, call_made=call_made)
            attrs[n.STEP_ID] = step_id
            if run_id is not None:
                attrs[n.RUN_ID] = run_id
            state = verdict.evidence.breakers.get(name)
            if state is not None:
                attrs[n.BREAKER_STATE] = state
            span.set_attributes(attrs)
            span.add_event(n.EVALUATION_EVENT, evaluation_attributes(verdict, attempt))
            if verdict.evidence.error_class is not None and call_made:
                # A refused call is no failed operation: its reason is the verdict event's explanation.
                span.set_status(_api.trace.Status(_api.trace.StatusCode.ERROR, verdict.reason))
        action = verdict.action.value
        owner = held if held is not None else scope
        if owner is not None:
            owner.link = span.get_span_context() if action == "switch" else None
            if owner.span.is_recording():
                owner.span.set_attributes(
                    {n.ACTION: action, n.ATTEMPTS: attempt, n.STEP_ID: step_id}
                    | ({n.RUN_ID: run_id} if run_id is not None else {})
                )
        if made:
            _end(span)
        if held is not None and action in TERMINAL:
            assert self.steps is not None
            self.steps.end((run_id, step_id), action)
        return span

    @staticmethod
    def record_hash(span: Any, digest: str | None) -> None:
        """Write a decision-log record's hash, known only after :meth:`verdict` (a record written at the
        end of a tool node's pass), on the attempt span ``verdict`` returned (still open: its end is
        held, :class:`held_ends`)."""
        if digest and span.is_recording():
            span.set_attribute(n.RECORD_HASH, digest)

    def restart_step(self, *, run_id: str | None, step_id: str) -> None:
        """A held step starts again on ``run_id`` (new input): a span of it still open is ended as
        unfinished (:mod:`retryctl.telemetry._held`)."""
        if self.steps is not None:
            self.steps.restart((run_id, step_id))


NO_TRACING = Tracing()
"""The tracing of a driver given no ``tracer_provider``: the global provider's, when one is set."""


def incoming_context(headers: Any) -> Any:
    """The trace an incoming request continues, as the ``context`` of :meth:`Tracing.step`: the current
    span's when one is open (a server instrumentation already continued the request's trace), else the
    request's W3C ``traceparent`` read by the application's global propagator; ``None`` (the current
    context) without the extra."""
    if _api.propagate is None or _api.trace.get_current_span().get_span_context().is_valid:
        return None
    return _api.propagate.extract(headers)
