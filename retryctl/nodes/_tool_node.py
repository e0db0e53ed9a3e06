"""``ControlledToolNode``: a drop-in for ``langgraph.prebuilt.ToolNode`` that puts every tool call under
the controller.

It *is* a ``ToolNode`` (so ``tools_condition``, ``create_react_agent(tools=...)``, injected state and
``ToolRuntime`` work unchanged): the control happens in ToolNode's own ``wrap_tool_call`` hook. Per call:
arguments are validated against the tool's schema first; the call runs under tenacity, which retries
while :func:`~retryctl.controller.decide` says ``retry`` (waiting at least the server's ``Retry-After``);
the result goes through the tool's validators; then the verdict: ``accept`` returns the result,
``refine`` returns an error ``ToolMessage`` whose text names the failing check and its evidence (never a
stack trace), ``switch`` runs the next tool of the same equivalence group whose breaker is not open,
``ask_user`` interrupts, ``stop`` returns an error ``ToolMessage`` saying so. Every message carries the
verdict in ``artifact["retryctl"]``. With ``timeout_s``, a call that does not answer in time fails with a
``TimeoutError`` (a transient fault) instead of holding the graph forever. A step with a single tool
call runs it in the node's own thread instead of a fresh worker thread (see ``_tool_inline``). The
calls never interrupt by themselves: the node puts their questions one at a time and hands each reply
to the call that asked (see ``_tool_ask``).
"""

from __future__ import annotations

import asyncio
import contextvars
import threading
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from langchain_core.messages import AnyMessage, ToolMessage
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import BaseTool
from langgraph.errors import GraphBubbleUp
from langgraph.prebuilt.tool_node import ToolCallRequest
from langgraph.runtime import Runtime
from langgraph.types import Command
from pydantic import BaseModel
from tenacity import AsyncRetrying, RetryCallState, Retrying

from retryctl._turn import yielded_turn, yielding
from retryctl.audit import DecisionLog
from retryctl.controller import Breaker, Clock, Ledger, Policy, Reservation, StepLedger, Verdict
from retryctl.controller._clock import monotonic
from retryctl.exceptions import ConfigError
from retryctl.nodes._backoff import WaitRetryAfter
from retryctl.nodes._events import Emitter
from retryctl.nodes._journal import MemoryToolJournal, ToolJournal
from retryctl.nodes._tool_ask import AskRound
from retryctl.nodes._tool_call import ToolCallController
from retryctl.nodes._tool_inline import InlineToolNode
from retryctl.nodes._tool_state import ArgsAdapter, CallState, ResultValidator

if TYPE_CHECKING:
    from retryctl.tools import ToolRegistry

__all__ = ["TOOL_POLICY", "ControlledToolNode"]

TOOL_POLICY = Policy(weights={"validators": 1.0})
"""The default policy of tool calls: a result is judged by its checks (``call_succeeded`` and the
tool's validators); a sampled model's agreement signals do not exist for a tool."""

_Result = ToolMessage | Command[Any]
_Input = list[AnyMessage] | dict[str, Any] | BaseModel


class ControlledToolNode(InlineToolNode):
    """A ``ToolNode`` whose every call ends in a verdict (see the module docstring).

    ``groups`` maps a group name to equivalent tools in the order to try them (``{"arithmetic":
    [calculator, python]}``); their tools are added to the node. ``adapters`` maps a tool name to a
    function that turns the arguments written for another tool of its group into its own.
    ``validators`` maps a tool name to checks ``(content, args) -> ValidatorResult | bool``.
    ``ledger`` is charged one ``attempts`` per call; an ``extend`` answer to ``ask_user`` raises its
    limits (``budget["attempts"]`` more calls, one by default, and any other limit it names), and the
    calls it allows are charged like any other. ``journal`` keeps the results of non-idempotent
    tools (``tool.metadata["idempotent"] = False``) and finished calls across a resume; use a
    :class:`~retryctl.nodes.SQLiteToolJournal` when the run may resume in another process.
    The journal knows a call by its thread and tool-call id, so a resumed run must replay the same
    tool calls: the checkpoint of the step that wrote them must be stored before this node runs.
    Non-idempotent tools therefore need ``durability="sync"`` (``graph.ainvoke(..., durability="sync")``;
    ``retryctl batch`` passes it to a checkpointed graph). With LangGraph's default, ``"async"``, that
    checkpoint may still be in flight while a tool runs; after a crash there the run starts that step
    again, a model writes new call ids, and the tool runs a second time under them.
    ``result_key`` (optional) also writes each call's typed result to that state key. ``clock``,
    ``sleep`` and ``asleep`` are injectable so tests never wait.

    ``timeout_s`` bounds each call (``None``: no bound). An async call that overruns is cancelled; a sync
    one cannot be stopped (Python cannot kill a thread), so it is left to finish in a daemon thread and
    its result is dropped: a non-idempotent sync tool that overruns may still complete its effect.
    """

    def __init__(
        self,
        tools: Sequence[BaseTool | Callable[..., Any]],
        *,
        groups: Mapping[str, Sequence[BaseTool]] | None = None,
        validators: Mapping[str, Sequence[ResultValidator]] | None = None,
        adapters: Mapping[str, ArgsAdapter] | None = None,
        policy: Policy | None = None,
        breaker: Breaker | None = None,
        ledger: Ledger | StepLedger | None = None,
        log: DecisionLog | None = None,
        journal: ToolJournal | None = None,
        backoff: WaitRetryAfter | None = None,
        sleep: Callable[[float], None] = time.sleep,
        asleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        clock: Clock = monotonic,
        timeout_s: float | None = None,
        name: str = "tools",
        tags: list[str] | None = None,
        messages_key: str = "messages",
        result_key: str | None = None,
    ) -> None:
        members = [t for group in (groups or {}).values() for t in group]
        seen = {t.name for t in tools if isinstance(t, BaseTool)}
        extra = [t for t in members if t.name not in seen and not seen.add(t.name)]  # type: ignore[func-returns-value]
        super().__init__(
            [*tools, *extra],
            name=name,
            tags=tags,
            handle_tool_errors=False,  # failures must reach the controller, not become plain messages
            messages_key=messages_key,
            wrap_tool_call=self._wrap,
            awrap_tool_call=self._awrap,
        )
        policy = policy or TOOL_POLICY
        if not policy.weights.get("validators", 0.0) > 0:
            raise ConfigError(
                field="policy.weights",
                value=dict(policy.weights),
                problem="a tool node judges results by their checks: give 'validators' a weight > 0",
            )
        order: dict[str, list[str]] = {}
        for group in (groups or {}).values():
            names = [t.name for t in group]
            for n in names:
                if n in order:
                    raise ConfigError(field="groups", value=n, problem="a tool can be in one group only")
                order[n] = names
        unknown = sorted(set(validators or {}) - set(self.tools_by_name))
        if unknown:
            raise ConfigError(field="validators", value=unknown, problem="names tools the node does not have")
        if timeout_s is not None and not timeout_s > 0:
            raise ConfigError(field="timeout_s", value=timeout_s, problem="must be > 0, or None for no bound")
        self.timeout_s = timeout_s
        self.backoff = backoff or WaitRetryAfter()
        self.sleep = sleep
        self.asleep = asleep
        self.controller = ToolCallController(
            tools=self.tools_by_name,
            groups=order,
            validators=validators or {},
            adapters=adapters or {},
            policy=policy,
            breaker=breaker,
            ledger=ledger,
            emitter=Emitter(log),
            journal=journal if journal is not None else MemoryToolJournal(),
            messages_key=messages_key,
            result_key=result_key,
            clock=clock,
        )

    @classmethod
    def from_registry(cls, registry: ToolRegistry, **kwargs: Any) -> ControlledToolNode:
        """A node with every tool of ``registry`` and its equivalence groups (a tool in one group)."""
        names = dict.fromkeys(g for t in registry.tools() for g in registry.groups_of(t.name))
        groups = {name: [registry.get(k) for k in registry.group(name)] for name in names}
        return cls(registry.tools(), groups=groups, **kwargs)

    # -- the node: passes over the step's calls, one question to the user at a time ------------------

    def _func(self, input: _Input, config: RunnableConfig, runtime: Runtime[Any]) -> Any:
        asks = self._asks(input, config)
        asks.replay()
        while True:
            with asks.attempt():
                output = super()._func(input, config, runtime)
            if not asks.waiting:
                return output
            asks.ask()

    async def _afunc(self, input: _Input, config: RunnableConfig, runtime: Runtime[Any]) -> Any:
        asks = self._asks(input, config)
        asks.replay()
        while True:
            with asks.attempt():
                output = await super()._afunc(input, config, runtime)
            if not asks.waiting:
                return output
            asks.ask()

    def _asks(self, input: _Input, config: RunnableConfig) -> AskRound:
        tool_calls, _ = self._parse_input(input)
        thread = (config.get("configurable") or {}).get("thread_id")
        ids = [str(call.get("id") or "") for call in tool_calls]
        return AskRound(self.controller.journal, thread, ids)

    # -- sync --------------------------------------------------------------------------------------

    def _wrap(self, request: ToolCallRequest, execute: Callable[[ToolCallRequest], _Result]) -> _Result:
        if request.tool is None:  # an unknown tool: ToolNode's own error message lists the valid ones
            return execute(request)
        st = self.controller.begin(request)
        if not isinstance(st, CallState):
            return st
        while True:
            verdict = self._pending(st) or self._attempt(st, request, execute)
            final = self.controller.after(st, verdict)
            if final is not None:
                return final

    def _attempt(
        self, st: CallState, request: ToolCallRequest, execute: Callable[[ToolCallRequest], _Result]
    ) -> Verdict:
        try:
            result: _Result = self._once(st, request, execute)
        except GraphBubbleUp:
            raise
        except BaseException as exc:
            # Most calls succeed at once, and a tenacity loop costs more than a quick tool: it is
            # built only after a failure, which it replays as its first attempt, so attempt numbers,
            # waits and verdicts are exactly those of one loop from the start.
            first = [exc]

            def again() -> _Result:
                if first:
                    raise first.pop()
                return self._once(st, request, execute)

            box: list[Verdict] = []
            retrying = Retrying(
                retry=self.controller.should_retry(st, box), wait=self._wait, sleep=self.sleep, reraise=True
            )
            try:
                result = retrying(again)
            except GraphBubbleUp:
                raise
            except Exception:
                return box[-1]
        return self.controller.on_success(st, result)

    def _once(
        self, st: CallState, request: ToolCallRequest, execute: Callable[[ToolCallRequest], _Result]
    ) -> _Result:
        prepared, reservation = self.controller.prepare(st, request)
        if isinstance(prepared, str):
            return self._replayed(st, prepared)
        try:
            result = _within(self.timeout_s, execute, prepared)
        except BaseException:
            _release(reservation)
            raise
        return self.controller.settle(st, reservation, result)

    # -- async -------------------------------------------------------------------------------------

    async def _awrap(
        self, request: ToolCallRequest, execute: Callable[[ToolCallRequest], Awaitable[_Result]]
    ) -> _Result:
        if request.tool is None:
            return await execute(request)
        st = self.controller.begin(request)
        if not isinstance(st, CallState):
            return st
        while True:
            verdict = self._pending(st) or await self._aattempt(st, request, execute)
            final = self.controller.after(st, verdict)
            if final is not None:
                return final

    async def _aattempt(
        self,
        st: CallState,
        request: ToolCallRequest,
        execute: Callable[[ToolCallRequest], Awaitable[_Result]],
    ) -> Verdict:
        try:
            result: _Result = await self._aonce(st, request, execute)
        except GraphBubbleUp:
            raise
        except BaseException as exc:
            first = [exc]  # as in _attempt: the loop starts by replaying the first failure

            async def again() -> _Result:
                if first:
                    raise first.pop()
                return await self._aonce(st, request, execute)

            box: list[Verdict] = []
            retrying = AsyncRetrying(
                retry=self.controller.should_retry(st, box),
                wait=self._wait,
                sleep=yielding(self.asleep),
                reraise=True,
            )
            try:
                result = await retrying(again)
            except GraphBubbleUp:
                raise
            except Exception:
                return box[-1]
        return self.controller.on_success(st, result)

    async def _aonce(
        self,
        st: CallState,
        request: ToolCallRequest,
        execute: Callable[[ToolCallRequest], Awaitable[_Result]],
    ) -> _Result:
        prepared, reservation = self.controller.prepare(st, request)
        if isinstance(prepared, str):
            return self._replayed(st, prepared)
        try:
            async with yielded_turn():
                result = await _awithin(self.timeout_s, execute(prepared))
        except BaseException:
            _release(reservation)
            raise
        return self.controller.settle(st, reservation, result)

    # -- shared ------------------------------------------------------------------------------------

    def _wait(self, retry_state: RetryCallState) -> float:
        # A backoff never sleeps past the ledger's wall-time limit: the next attempt is refused there,
        # and the call stops within its budget instead of after it.
        wait = self.backoff(retry_state)
        ledger = self.controller.ledger
        left = ledger.remaining().wall_s if ledger is not None else None
        return wait if left is None else min(wait, left)

    @staticmethod
    def _pending(st: CallState) -> Verdict | None:
        verdict, st.pending_ask = st.pending_ask, None
        return verdict

    @staticmethod
    def _replayed(st: CallState, content: str) -> ToolMessage:
        # A non-idempotent tool already ran for this call before a resume: its recorded result stands.
        st.content = content
        return ToolMessage(content=content, name=st.target, tool_call_id=str(st.call.get("id") or ""))


def _release(reservation: Reservation | None) -> None:
    if reservation is not None and reservation.state == "open":
        reservation.release()


def _overran(timeout_s: float) -> TimeoutError:
    return TimeoutError(f"the tool did not answer within timeout_s={timeout_s:g}")


def _within(
    timeout_s: float | None, execute: Callable[[ToolCallRequest], _Result], request: ToolCallRequest
) -> _Result:
    """``execute(request)``, given up after ``timeout_s``: it runs in a daemon thread (with this
    thread's context, which carries LangGraph's config) that is abandoned if it overruns."""
    if timeout_s is None:
        return execute(request)
    context = contextvars.copy_context()
    outcome: list[tuple[bool, Any]] = []

    def run() -> None:
        try:
            outcome.append((True, context.run(execute, request)))
        except BaseException as exc:
            outcome.append((False, exc))

    worker = threading.Thread(target=run, name="retryctl-tool-call", daemon=True)
    worker.start()
    worker.join(timeout_s)
    if not outcome:
        raise _overran(timeout_s)
    finished, value = outcome[0]
    if not finished:
        raise value
    result: _Result = value
    return result


async def _awithin(timeout_s: float | None, call: Awaitable[_Result]) -> _Result:
    """``await call``, cancelled after ``timeout_s``; a ``TimeoutError`` the tool raised itself passes."""
    scope = asyncio.timeout(timeout_s)
    try:
        async with scope:
            return await call
    except TimeoutError as exc:
        if scope.expired():
            raise _overran(timeout_s or 0.0) from exc
        raise
