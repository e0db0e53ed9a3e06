"""``ControlledToolCalls``: the controlled run of one tool call, in LangGraph's ``ToolCallWrapper`` shape.

It needs no ``ToolNode``: ``wrap(request, execute)`` and ``await awrap(request, execute)`` take a
:class:`~langgraph.prebuilt.tool_node.ToolCallRequest` and the ``execute`` callable that runs it once,
which is what ``ToolNode(wrap_tool_call=...)`` and LangChain's ``AgentMiddleware.wrap_tool_call`` hand
a wrapper. :class:`~retryctl.nodes.ControlledToolNode` passes it to ToolNode's public hooks; the
``create_agent`` middleware calls it from its own ``wrap_tool_call``.

Per call: the call runs under tenacity, which retries while :func:`~retryctl.controller.decide` says
``retry`` (waiting at least the server's ``Retry-After``); the result goes through the tool's validators;
then the verdict (acted on in :meth:`~retryctl.nodes._tool_outcome.ToolOutcomes.after`, the one place
that moves a call on: switch target, retry counter, extended budget).
"""

from __future__ import annotations

import asyncio
import copy
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

from langchain_core.tools import BaseTool
from langgraph.errors import GraphBubbleUp
from langgraph.prebuilt.tool_node import ToolCallRequest

from retryctl._turn import yielded_turn
from retryctl.audit import DecisionLog
from retryctl.controller import (
    Act,
    Breaker,
    Clock,
    Ledger,
    Policy,
    Reservation,
    Sleep,
    StepLedger,
    Usage,
    Verdict,
)
from retryctl.controller._clock import monotonic
from retryctl.controller._error_rules import ClassifyHook, RetryOn, error_classifier
from retryctl.exceptions import ConfigError
from retryctl.nodes._backoff import WaitRetryAfter
from retryctl.nodes._events import Emitter
from retryctl.nodes._journal import MemoryToolJournal, ToolJournal
from retryctl.nodes._lc_runs import tagged_tool_request
from retryctl.nodes._tool_call import ToolCallController
from retryctl.nodes._tool_defer import DeferredLog
from retryctl.nodes._tool_errors import DEFAULT_HANDLE_TOOL_ERRORS, ErrorHandling, HandleToolErrors
from retryctl.nodes._tool_state import ArgsAdapter, CallState, ResultValidator, ToolResult, is_idempotent
from retryctl.nodes._tool_timeout import awithin, within
from retryctl.telemetry import Tracing
from retryctl.telemetry import names as otel_names
from retryctl.telemetry._provider import check_tracer_provider

__all__ = ["TOOL_POLICY", "AsyncExecute", "ControlledToolCalls", "Execute"]

_ONE_ATTEMPT = Usage(attempts=1)

TOOL_POLICY = Policy(weights={"validators": 1.0})
"""The default policy of tool calls: a result is judged by its checks (``call_succeeded`` and the
tool's validators); a sampled model's agreement signals do not exist for a tool. A result that
returned and has no validator is accepted unchecked (``Verdict.checked`` false, no confidence)."""

Execute = Callable[[ToolCallRequest], ToolResult]
AsyncExecute = Callable[[ToolCallRequest], Awaitable[ToolResult]]


def _members(
    tools: Mapping[str, BaseTool] | Sequence[BaseTool],
    groups: Mapping[str, Sequence[BaseTool | str]] | None,
) -> tuple[dict[str, BaseTool], dict[str, list[str]]]:
    by_name = dict(tools) if isinstance(tools, Mapping) else {t.name: t for t in tools}
    order: dict[str, list[str]] = {}
    for group, members in (groups or {}).items():
        names: list[str] = []
        for member in members:
            if isinstance(member, BaseTool):
                by_name.setdefault(member.name, member)
                names.append(member.name)
            elif member in by_name:
                names.append(member)
            else:
                raise ConfigError(
                    field=f"groups[{group!r}]", value=member, problem="names a tool that is not given"
                )
        for n in names:
            if n in order:
                raise ConfigError(field="groups", value=n, problem="a tool can be in one group only")
            order[n] = names
    return by_name, order


class ControlledToolCalls:
    """The controlled run of one tool call (see the module docstring)."""

    def __init__(
        self,
        tools: Mapping[str, BaseTool] | Sequence[BaseTool],
        *,
        groups: Mapping[str, Sequence[BaseTool | str]] | None = None,
        validators: Mapping[str, Sequence[ResultValidator]] | None = None,
        adapters: Mapping[str, ArgsAdapter] | None = None,
        policy: Policy | None = None,
        breaker: Breaker | None = None,
        ledger: Ledger | StepLedger | None = None,
        log: DecisionLog | None = None,
        emitter: Emitter | None = None,
        stream_events: bool = False,
        journal: ToolJournal | None = None,
        backoff: WaitRetryAfter | None = None,
        sleep: Callable[[float], None] = time.sleep,
        asleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        clock: Clock = monotonic,
        timeout_s: float | None = None,
        handle_tool_errors: HandleToolErrors = DEFAULT_HANDLE_TOOL_ERRORS,
        messages_key: str = "messages",
        result_key: str | None = None,
        retry_on: RetryOn | None = None,
        classify: ClassifyHook | None = None,
        tracer_provider: Any = None,
    ) -> None:
        """Everything a controlled call needs; every argument but ``tools`` is optional.

        - ``tools``: the tools a call may run, by name (a mapping) or as a sequence. A call whose
          ``request.tool`` is ``None`` (a tool nobody registered) is passed to ``execute`` untouched.
        - ``groups``: group name -> equivalent tools in the order to try them, as tools or as names of
          ``tools`` (``{"arithmetic": [multiply, "multiply_backup"]}``); a tool is in one group at
          most, and tools given here are added to ``tools``. A switch runs the next member whose
          breaker is not open, through ``execute(request.override(tool=..., tool_call=...))``.
        - ``validators``: tool name -> checks ``(content, args) -> ValidatorResult | bool`` of a result.
        - ``adapters``: tool name -> a function turning the arguments written for another tool of its
          group into its own.
        - ``policy``: the verdict policy (default :data:`TOOL_POLICY`; ``weights["validators"]`` must
          be > 0). ``breaker``: one :class:`~retryctl.controller.Breaker` keyed by tool name.
        - ``ledger``: charged one ``attempts`` per call started; a person's ``extend`` raises it.
        - ``log``: a :class:`~retryctl.audit.DecisionLog` for every verdict; or pass ``emitter`` (an
          :class:`~retryctl.nodes.Emitter`, e.g. one shared with other drivers), which wins over ``log``.
          ``stream_events``: also write each verdict to LangGraph's custom stream (off by default, so a
          ``stream_mode="custom"`` consumer sees only what the tools write).
        - ``journal``: results of non-idempotent tools and finished calls, kept across a resume
          (default: in memory); keyed by thread, task and tool-call id, so a resume of the same step
          replays while a later step that reuses a call id runs again.
        - ``backoff``, ``sleep``, ``asleep``, ``clock``: waits between retries and time, injectable so
          tests never wait. ``timeout_s``: a bound on each attempt (``None``: none); an overrun is a
          transient fault, but a non-idempotent sync tool's (its thread runs on) is never retried.
        - ``handle_tool_errors``: what becomes of an error the controller has nothing to add to (it
          ends the call): ToolNode's argument, with ToolNode's default and meaning (raise, or an error
          ``ToolMessage`` made as ToolNode makes it). Give ``False`` when ``execute`` already applies
          ToolNode's handling (a ``create_agent`` middleware), so such errors leave as they came.
          An error ``ToolMessage`` that ``execute`` returns is treated as the tool's report of bad input
          (a refine) and, when it ends the call, returned as it is.
        - ``messages_key``: the state key of the messages (to count this turn's refines);
          ``result_key``: also write each call's typed result to that state key (through a ``Command``).
        - ``retry_on``: the exceptions to retry, as LangChain's ``ToolRetryMiddleware`` takes them (a
          tuple of exception classes, or a predicate of the exception); one it does not match is never
          retried (a transient one is terminal: a switch, or the end of the call). ``classify``: a
          function of the exception returning an :class:`~retryctl.controller.ErrorClass` (or a
          ``Classification``), or ``None`` for the default. Both are read by
          :func:`~retryctl.controller.error_classifier`.
        - ``tracer_provider``: the OpenTelemetry tracer provider of the spans (``retryctl.tool
          <name>``, an attempt span per attempt; :mod:`retryctl.telemetry`); ``None``: the
          application's global one, if it set one. With ``emitter``, the emitter's tracing is used.

        ``wrap`` and ``awrap`` may run concurrently for the calls of one step; one instance serves
        any number of graphs and runs.
        """
        by_name, order = _members(tools, groups)
        classifier = error_classifier(retry_on=retry_on, classify=classify)
        policy = policy or TOOL_POLICY
        if not policy.weights.get("validators", 0.0) > 0:
            raise ConfigError(
                field="policy.weights",
                value=dict(policy.weights),
                problem="a tool call is judged by its checks: give 'validators' a weight > 0",
            )
        unknown = sorted(set(validators or {}) - set(by_name))
        if unknown:
            raise ConfigError(field="validators", value=unknown, problem="names tools that are not given")
        if timeout_s is not None and not timeout_s > 0:
            raise ConfigError(field="timeout_s", value=timeout_s, problem="must be > 0, or None for no bound")
        self.tools = by_name
        self.timeout_s = timeout_s
        self.backoff = backoff or WaitRetryAfter()
        self.sleep = sleep
        self.asleep = asleep
        self.controller = ToolCallController(
            tools=by_name,
            groups=order,
            validators=validators or {},
            adapters=adapters or {},
            policy=policy,
            breaker=breaker,
            ledger=ledger,
            emitter=emitter
            if emitter is not None
            else Emitter(
                _deferred(log), stream=stream_events, tracing=Tracing(check_tracer_provider(tracer_provider))
            ),
            journal=journal if journal is not None else MemoryToolJournal(),
            errors=ErrorHandling(handle_tool_errors),
            messages_key=messages_key,
            result_key=result_key,
            backoff=self.backoff.for_retry,
            clock=clock,
            classifier=classifier,
        )
        self.tracing = self.controller.emitter.tracing

    def with_ledger(self, ledger: Ledger | StepLedger | None) -> ControlledToolCalls:
        """The same settings, charging ``ledger`` (a view per agent run: nothing that one run writes is
        shared with another)."""
        view = copy.copy(self)
        view.controller = copy.copy(self.controller)
        view.controller.ledger = ledger
        return view

    # -- sync: the attempt engine's requests, done with blocking calls ----------------------------

    def wrap(self, request: ToolCallRequest, execute: Execute) -> ToolResult:
        """Run ``request`` under the controller; ``execute`` runs one attempt (any number of times)."""
        if request.tool is None:  # an unknown tool: execute's own error message lists the valid ones
            return execute(request)
        with self.tracing.step(request.tool_call["name"], kind="tool", attributes=_call_attributes(request)):
            st = self.controller.begin(request)
            if not isinstance(st, CallState):
                return st
            step: ToolResult | Act | Sleep | None = None
            if st.pending_ask is not None:
                step = self.controller.ask(st, _pending(st))
            while True:
                if isinstance(step, Sleep):
                    self.sleep(step.seconds)
                elif step is not None and not isinstance(step, Act):
                    return step
                step = self.controller.after(st, self._attempt(st, request, execute))

    def _attempt(self, st: CallState, request: ToolCallRequest, execute: Execute) -> Verdict:
        with self.tracing.attempt(st.flow.target, st.flow.attempt):
            try:
                result = self._once(st, request, execute)
            except GraphBubbleUp:
                raise
            except Exception as exc:
                return self.controller.on_failure(st, exc)
            return self.controller.on_success(st, result)

    def _once(self, st: CallState, request: ToolCallRequest, execute: Execute) -> ToolResult:
        prepared, reservation = self.controller.prepare(st, request)
        if not isinstance(prepared, ToolCallRequest):
            return prepared  # a non-idempotent tool's journaled result
        prepared = tagged_tool_request(prepared, st.flow.attempt, st.flow.target)
        try:
            rerunnable = prepared.tool is None or is_idempotent(prepared.tool)
            result = within(self.timeout_s, execute, prepared, idempotent=rerunnable)
        except BaseException as exc:
            _close(reservation, exc)
            raise
        return self.controller.settle(st, reservation, result)

    # -- async: the same requests, awaited -----------------------------------------------------------

    async def awrap(self, request: ToolCallRequest, execute: AsyncExecute) -> ToolResult:
        """:meth:`wrap` for ``ainvoke``: ``execute`` is awaited, waits use ``asleep``."""
        if request.tool is None:
            return await execute(request)
        with self.tracing.step(request.tool_call["name"], kind="tool", attributes=_call_attributes(request)):
            st = self.controller.begin(request)
            if not isinstance(st, CallState):
                return st
            step: ToolResult | Act | Sleep | None = None
            if st.pending_ask is not None:
                step = self.controller.ask(st, _pending(st))
            while True:
                if isinstance(step, Sleep):
                    async with yielded_turn():  # a batch's other tasks run while this call waits
                        await self.asleep(step.seconds)
                elif step is not None and not isinstance(step, Act):
                    return step
                step = self.controller.after(st, await self._aattempt(st, request, execute))

    async def _aattempt(self, st: CallState, request: ToolCallRequest, execute: AsyncExecute) -> Verdict:
        with self.tracing.attempt(st.flow.target, st.flow.attempt):
            try:
                result = await self._aonce(st, request, execute)
            except GraphBubbleUp:
                raise
            except Exception as exc:
                return self.controller.on_failure(st, exc)
            return self.controller.on_success(st, result)

    async def _aonce(self, st: CallState, request: ToolCallRequest, execute: AsyncExecute) -> ToolResult:
        prepared, reservation = self.controller.prepare(st, request)
        if not isinstance(prepared, ToolCallRequest):
            return prepared
        prepared = tagged_tool_request(prepared, st.flow.attempt, st.flow.target)
        try:
            async with yielded_turn():
                result = await awithin(self.timeout_s, execute(prepared))
        except BaseException as exc:
            _close(reservation, exc)
            raise
        return self.controller.settle(st, reservation, result)


def _deferred(log: DecisionLog | None) -> DeferredLog | None:
    # Inside a node pass its records wait for the pass to end (see _tool_defer).
    return None if log is None else DeferredLog(log)


def _call_attributes(request: ToolCallRequest) -> dict[str, Any]:
    """The tool span's own attributes: the call's id (``gen_ai.tool.call.id``)."""
    call_id = request.tool_call.get("id")
    return {otel_names.TOOL_CALL_ID: call_id} if call_id else {}


def _pending(st: CallState) -> Verdict:
    verdict, st.pending_ask = st.pending_ask, None
    assert verdict is not None
    return verdict


def _close(reservation: Reservation | None, exc: BaseException) -> None:
    """Settle the reservation of an attempt that raised: a call that ran and failed still cost an
    attempt (so a failing tool cannot be retried past the attempts budget); one that was interrupted
    (a question inside the tool) or cancelled did not finish, and gives its reservation back."""
    if reservation is None or reservation.state != "open":
        return
    if isinstance(exc, Exception) and not isinstance(exc, GraphBubbleUp):
        reservation.commit(_ONE_ATTEMPT)
    else:
        reservation.release()
