"""``ControlledToolNode``: LangGraph's ``ToolNode`` with every tool call under the controller.

It *is* a ``ToolNode`` with ToolNode's whole signature and meaning (``tools_condition``,
``create_react_agent(tools=...)``, injected state, store and ``ToolRuntime``, any state schema, results
as the tools return them), plus the controller's keywords. The control happens in ToolNode's public
``wrap_tool_call``/``awrap_tool_call`` hooks, through :class:`~retryctl.nodes.ControlledToolCalls`:
transient faults are retried with backoff, a failing tool is switched for the next of its equivalence
group, results go through their validators, a spent budget or an open breaker stops the call with a
message saying so, ``ask_user`` asks a person. Where the controller has nothing to add (no group, a
terminal error, a bug in the tool, bad arguments, an invalid ``Command``, a missing store, an unknown
tool), the outcome is ToolNode's, as ``handle_tool_errors`` says.

Wrappers compose as ``wrap_tool_call(request, controlled)``: the caller's wrapper is outermost. It
sees the request as the model wrote it and, from each ``execute`` it calls, the controller's final
result for the call (after its retries and switches, with ``handle_tool_errors`` applied as ToolNode's
``execute`` applies it); what it raises is handled as ToolNode handles a wrapper's errors.

The calls never interrupt by themselves: the node's ``invoke``/``ainvoke`` put their questions one at a
time and hand each reply to the call that asked (see ``_tool_ask``); and the records of each pass over
the calls are written when it ends, in the node's thread (see ``_tool_defer``).
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, cast

from langchain_core.messages import AIMessage
from langchain_core.runnables import RunnableConfig, ensure_config
from langchain_core.tools import BaseTool
from langgraph.errors import GraphBubbleUp
from langgraph.prebuilt import ToolNode
from langgraph.prebuilt.tool_node import AsyncToolCallWrapper, ToolCallRequest, ToolCallWrapper

from retryctl.audit import DecisionLog
from retryctl.controller import Breaker, Budget, Clock, Ledger, Policy, StepLedger
from retryctl.controller._clock import monotonic
from retryctl.controller._error_rules import ClassifyHook, RetryOn
from retryctl.exceptions import ConfigError
from retryctl.nodes._arguments import DriverArguments, check_arguments, open_log, waits
from retryctl.nodes._backoff import WaitRetryAfter
from retryctl.nodes._journal import ToolJournal
from retryctl.nodes._tool_ask import AskRound
from retryctl.nodes._tool_calls import TOOL_POLICY, AsyncExecute, ControlledToolCalls, Execute
from retryctl.nodes._tool_defer import deferring
from retryctl.nodes._tool_errors import DEFAULT_HANDLE_TOOL_ERRORS, ErrorHandling, HandleToolErrors
from retryctl.nodes._tool_state import ArgsAdapter, ResultValidator, ToolResult

if TYPE_CHECKING:
    from retryctl.tools import ToolRegistry

__all__ = ["TOOL_POLICY", "ControlledToolNode"]


class ControlledToolNode(ToolNode):
    """A ``ToolNode`` whose every call ends in a verdict (see the module docstring).

    ToolNode's arguments (``tools``, ``name``, ``tags``, ``handle_tool_errors``, ``messages_key``,
    ``wrap_tool_call``, ``awrap_tool_call``) mean what they mean there, with the same defaults.
    ``handle_tool_errors`` applies to the errors that end a call; the controller acts first on the
    errors it can do something about (a transient fault is retried, a tool with a group is switched),
    so with ``handle_tool_errors=True`` a flaky tool is retried before any error message is written.

    ``groups`` maps a group name to equivalent tools in the order to try them, each a tool or the name
    of one of ``tools`` (``{"arithmetic": [calculator, "python"]}``); the tools given are added to the
    node. ``budget`` (a :class:`~retryctl.controller.Budget`) limits every call the node makes, on one
    ledger for the node's life; ``run_ledger`` is a :class:`~retryctl.controller.Ledger` shared with
    other nodes (a ``ControlledStep``'s ``run_ledger``), charged too (with ``budget``, the node's calls
    are a step of it named after the node). ``log`` is a :class:`~retryctl.audit.DecisionLog` or the
    path of one. ``adapters``, ``validators``, ``policy``, ``breaker``, ``journal``, ``backoff``,
    ``sleep``, ``asleep``, ``clock``, ``timeout_s``, ``result_key``, ``stream_events`` and
    ``tracer_provider`` (OpenTelemetry spans: :mod:`retryctl.telemetry`) are those of
    :class:`~retryctl.nodes.ControlledToolCalls` (read its constructor's docstring); a ``sleep`` given
    alone also serves ``ainvoke``, in a worker thread. ``ledger`` is the former name of
    ``run_ledger`` (deprecated). Every argument is checked here: a wrong one is a
    :class:`~retryctl.exceptions.ConfigError` naming it (``groups['g'][0]``, ``policy``, ``log``).

    The journal knows a call by its thread, task and tool-call id, so a resumed run must replay the
    same tool calls: the checkpoint of the step that wrote them must be stored before this node runs.
    Non-idempotent tools (``tool.metadata["idempotent"] = False``) therefore need ``durability="sync"``
    (``graph.ainvoke(..., durability="sync")``; ``retryctl batch`` passes it to a checkpointed graph).
    With LangGraph's default, ``"async"``, that checkpoint may still be in flight while a tool runs;
    after a crash there the run starts that step again, a model writes new call ids, and the tool runs
    a second time under them. Use a :class:`~retryctl.nodes.SQLiteToolJournal` when the run may resume
    in another process.

    ``timeout_s`` bounds each call (``None``: no bound). An async call that overruns is cancelled; a sync
    one cannot be stopped (Python cannot kill a thread), so it is left to finish in a daemon thread and
    its result is dropped. It may still complete its effect, so a non-idempotent sync tool that overruns
    is not run again (a terminal ``AbandonedCall``: a switch or a stop); any other is retried.
    """

    def __init__(
        self,
        tools: Sequence[BaseTool | Callable[..., Any]],
        *,
        name: str = "tools",
        tags: list[str] | None = None,
        handle_tool_errors: HandleToolErrors = DEFAULT_HANDLE_TOOL_ERRORS,
        messages_key: str = "messages",
        wrap_tool_call: ToolCallWrapper | None = None,
        awrap_tool_call: AsyncToolCallWrapper | None = None,
        groups: Mapping[str, Sequence[BaseTool | str]] | None = None,
        validators: Mapping[str, Sequence[ResultValidator]] | None = None,
        adapters: Mapping[str, ArgsAdapter] | None = None,
        policy: Policy | None = None,
        breaker: Breaker | None = None,
        budget: Budget | None = None,
        run_ledger: Ledger | StepLedger | None = None,
        log: DecisionLog | str | os.PathLike[str] | None = None,
        journal: ToolJournal | None = None,
        backoff: WaitRetryAfter | None = None,
        sleep: Callable[[float], None] | None = None,
        asleep: Callable[[float], Awaitable[None]] | None = None,
        clock: Clock = monotonic,
        timeout_s: float | None = None,
        result_key: str | None = None,
        stream_events: bool = False,
        ledger: Ledger | StepLedger | None = None,
        retry_on: RetryOn | None = None,
        classify: ClassifyHook | None = None,
        tracer_provider: Any = None,
    ) -> None:
        if ledger is not None:
            warnings.warn(
                "ControlledToolNode(ledger=...) is deprecated: pass run_ledger= (the name ControlledStep "
                "uses), or budget=Budget(...) for limits alone",
                DeprecationWarning,
                stacklevel=2,
            )
            if run_ledger is not None:
                raise ConfigError(field="ledger", value=ledger, problem="give run_ledger alone")
        args = check_arguments(
            DriverArguments,
            groups=groups,
            policy=policy,
            budget=budget,
            # Checked under the name it was given by, so that the error names it.
            **({"run_ledger": run_ledger} if ledger is None else {"ledger": ledger}),
            breaker=breaker,
            journal=journal,
            backoff=backoff,
            sleep=sleep,
            asleep=asleep,
            clock=clock,
            timeout_s=timeout_s,
            tracer_provider=tracer_provider,
        )
        groups = args.groups or {}
        members = [t for group in groups.values() for t in group if isinstance(t, BaseTool)]
        seen = {t.name for t in tools if isinstance(t, BaseTool)}
        extra = [t for t in members if t.name not in seen and not seen.add(t.name)]  # type: ignore[func-returns-value]
        self._outer = wrap_tool_call
        self._aouter = awrap_tool_call
        super().__init__(
            [*tools, *extra],
            name=name,
            tags=tags,
            # Every error must reach the controller as the exception it is; handle_tool_errors is
            # applied once the controller is done (ErrorHandling), as ToolNode applies it.
            handle_tool_errors=False,
            messages_key=messages_key,
            # ToolNode's wrapper types say ToolMessage | Command; its execute also returns lists of them
            # (a tool that returned one), which the controller passes on as they are.
            wrap_tool_call=cast("ToolCallWrapper", self._wrap),
            # Only a sync wrapper of the caller's: ToolNode runs it (and so the whole call) sync under
            # ainvoke too, and so does this node.
            awrap_tool_call=cast("AsyncToolCallWrapper", self._awrap)
            if awrap_tool_call is not None or wrap_tool_call is None
            else None,
        )
        for group, given in groups.items():
            for i, member in enumerate(given):
                if isinstance(member, str) and member not in self.tools_by_name:
                    problem = "names none of the node's tools (give the tool itself to add it)"
                    raise ConfigError(field=f"groups[{group!r}][{i}]", value=member, problem=problem)
        shared = args.run_ledger if args.run_ledger is not None else args.ledger
        charged = _node_ledger(name, args.budget, shared, clock)
        self.handle_tool_errors = handle_tool_errors
        self._errors = ErrorHandling(handle_tool_errors)
        wait, await_ = waits(sleep, asleep)
        self.calls = ControlledToolCalls(
            self.tools_by_name,
            groups={g: [m if isinstance(m, str) else m.name for m in ms] for g, ms in groups.items()},
            validators=validators,
            adapters=adapters,
            policy=policy,
            breaker=breaker,
            ledger=charged,
            log=open_log(log),
            stream_events=stream_events,
            journal=journal,
            backoff=backoff,
            sleep=wait,
            asleep=await_,
            clock=clock,
            timeout_s=timeout_s,
            handle_tool_errors=handle_tool_errors,
            messages_key=messages_key,
            result_key=result_key,
            tracer_provider=tracer_provider,
            retry_on=retry_on,
            classify=classify,
        )
        self.controller = self.calls.controller

    @classmethod
    def from_registry(cls, registry: ToolRegistry, **kwargs: Any) -> ControlledToolNode:
        """A node with every tool of ``registry`` and its equivalence groups (a tool in one group)."""
        names = dict.fromkeys(g for t in registry.tools() for g in registry.groups_of(t.name))
        groups = {name: [registry.get(k) for k in registry.group(name)] for name in names}
        return cls(registry.tools(), groups=groups, **kwargs)

    # -- the node: passes over the step's calls, one question to the user at a time ------------------

    def invoke(self, input: Any, config: RunnableConfig | None = None, **kwargs: Any) -> Any:
        """ToolNode's ``invoke``, run again after each question a call puts to the user."""
        asks = self._asks(input, config)
        asks.replay()
        while True:
            with asks.attempt(), deferring():
                output = super().invoke(input, config, **kwargs)
            if not asks.waiting:
                return output
            asks.ask()

    async def ainvoke(self, input: Any, config: RunnableConfig | None = None, **kwargs: Any) -> Any:
        """ToolNode's ``ainvoke``, run again after each question a call puts to the user."""
        asks = self._asks(input, config)
        asks.replay()
        while True:
            with asks.attempt(), deferring():
                output = await super().ainvoke(input, config, **kwargs)
            if not asks.waiting:
                return output
            asks.ask()

    def _asks(self, input: Any, config: RunnableConfig | None) -> AskRound:
        ids = [str(call.get("id") or "") for call in _tool_calls(input, self._messages_key, copy=False)]
        # ensure_config copies the callbacks; the round reads only the thread and task ids, which a
        # graph always passes (a direct node.invoke() finds them in the caller's config, if any).
        return AskRound(self.controller.journal, config if config is not None else ensure_config(), ids)

    # -- the wrappers ToolNode calls ----------------------------------------------------------------

    def _wrap(self, request: ToolCallRequest, execute: Execute) -> ToolResult:
        if self._outer is None:
            return self.calls.wrap(request, execute)
        try:
            return self._outer(request, lambda req: self.calls.wrap(req, execute))  # type: ignore[arg-type,return-value]
        except GraphBubbleUp:
            raise
        except Exception as exc:
            message = self._errors.wrapper_error(exc, request.tool_call)
            if message is None:
                raise
            return message

    async def _awrap(self, request: ToolCallRequest, execute: AsyncExecute) -> ToolResult:
        if self._aouter is None:
            return await self.calls.awrap(request, execute)

        async def controlled(req: ToolCallRequest) -> ToolResult:
            return await self.calls.awrap(req, execute)

        try:
            return await self._aouter(request, controlled)  # type: ignore[arg-type]
        except GraphBubbleUp:
            raise
        except Exception as exc:
            message = self._errors.wrapper_error(exc, request.tool_call)
            if message is None:
                raise
            return message


def _node_ledger(
    name: str, budget: Budget | None, shared: Ledger | StepLedger | None, clock: Clock
) -> Ledger | StepLedger | None:
    """The ledger the node's calls are charged on: the shared one, a step of it under ``budget``, or
    the node's own ledger of ``budget``."""
    if budget is None:
        return shared
    if shared is None:
        return Ledger(budget, clock=clock)
    if isinstance(shared, StepLedger):
        problem = "a StepLedger has its budget already: give run_ledger=the run's Ledger, or no budget"
        raise ConfigError(field="budget", value=budget, problem=problem)
    return shared.step(name, budget=budget)


def _tool_calls(input: Any, messages_key: str, *, copy: bool = True) -> list[dict[str, Any]]:
    """The step's tool calls in the model's order, from any input ToolNode takes (a list of tool
    calls, a ``Send`` payload, messages, or a state of any schema holding them); with
    ``copy=False`` the calls themselves, to be read only."""
    if (
        isinstance(input, list)
        and input
        and isinstance(input[-1], dict)
        and input[-1].get("type") == "tool_call"
    ):
        return list(input)
    if isinstance(input, dict) and input.get("__type") == "tool_call_with_context":
        return [dict(input["tool_call"])]
    if isinstance(input, list):
        messages: Any = input
    elif isinstance(input, dict):
        messages = input.get(messages_key) or []
    else:
        messages = getattr(input, messages_key, None) or []
    for message in reversed(messages) if isinstance(messages, list) else reversed(list(messages)):
        if isinstance(message, AIMessage):
            calls: list[Any] = message.tool_calls
            return [dict(c) for c in calls] if copy else list(calls)
    return []
