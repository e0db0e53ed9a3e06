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
verdict in ``artifact["retryctl"]``.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from langchain_core.messages import ToolMessage
from langchain_core.tools import BaseTool
from langgraph.errors import GraphBubbleUp
from langgraph.prebuilt import ToolNode
from langgraph.prebuilt.tool_node import ToolCallRequest
from langgraph.types import Command
from tenacity import AsyncRetrying, Retrying

from retryctl.audit import DecisionLog
from retryctl.controller import Breaker, Clock, Ledger, Policy, Reservation, StepLedger, Verdict
from retryctl.controller._clock import monotonic
from retryctl.exceptions import ConfigError
from retryctl.nodes._backoff import WaitRetryAfter
from retryctl.nodes._events import Emitter
from retryctl.nodes._journal import MemoryToolJournal, ToolJournal
from retryctl.nodes._tool_call import ToolCallController
from retryctl.nodes._tool_state import ArgsAdapter, CallState, ResultValidator

if TYPE_CHECKING:
    from retryctl.tools import ToolRegistry

__all__ = ["TOOL_POLICY", "ControlledToolNode"]

TOOL_POLICY = Policy(weights={"validators": 1.0})
"""The default policy of tool calls: a result is judged by its checks (``call_succeeded`` and the
tool's validators); a sampled model's agreement signals do not exist for a tool."""

_Result = ToolMessage | Command[Any]


class ControlledToolNode(ToolNode):
    """A ``ToolNode`` whose every call ends in a verdict (see the module docstring).

    ``groups`` maps a group name to equivalent tools in the order to try them (``{"arithmetic":
    [calculator, python]}``); their tools are added to the node. ``adapters`` maps a tool name to a
    function that turns the arguments written for another tool of its group into its own.
    ``validators`` maps a tool name to checks ``(content, args) -> ValidatorResult | bool``.
    ``ledger`` is charged one ``attempts`` per call. ``journal`` keeps the results of non-idempotent
    tools (``tool.metadata["idempotent"] = False``) and finished calls across a resume; use a
    :class:`~retryctl.nodes.SQLiteToolJournal` when the run may resume in another process.
    ``result_key`` (optional) also writes each call's typed result to that state key. ``clock``,
    ``sleep`` and ``asleep`` are injectable so tests never wait.
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
        box: list[Verdict] = []
        retrying = Retrying(
            retry=self.controller.should_retry(st, box), wait=self.backoff, sleep=self.sleep, reraise=True
        )
        try:
            result: _Result = retrying(self._once, st, request, execute)
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
            result = execute(prepared)
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
        box: list[Verdict] = []
        retrying = AsyncRetrying(
            retry=self.controller.should_retry(st, box), wait=self.backoff, sleep=self.asleep, reraise=True
        )
        try:
            result: _Result = await retrying(self._aonce, st, request, execute)
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
            result = await execute(prepared)
        except BaseException:
            _release(reservation)
            raise
        return self.controller.settle(st, reservation, result)

    # -- shared ------------------------------------------------------------------------------------

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
