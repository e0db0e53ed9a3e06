"""The tool side of the middleware: each tool call runs under
:class:`~retryctl.nodes._tool_calls.ControlledToolCalls` with the ledger of its own run.

One ``ControlledToolCalls`` holds the agent's settings (tools, groups, validators, policy, breaker,
journal, emitter). A run's calls must be charged to that run's ledger, and runs of one agent go on at
once in many threads, so each run gets a shallow view of it whose controller holds the run's ledger
(:meth:`ToolCalls.of`): a few attribute copies per run, nothing shared that one run writes.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from langgraph.prebuilt.tool_node import ToolCallRequest

from retryctl.middleware._runs import Run
from retryctl.nodes._tool_calls import ControlledToolCalls
from retryctl.nodes._tool_state import ToolResult

__all__ = ["ToolCalls"]


class ToolCalls:
    """The agent's controlled tool calls, one view per run (see the module docstring)."""

    def __init__(self, calls: ControlledToolCalls) -> None:
        self.calls = calls

    def of(self, run: Run) -> ControlledToolCalls:
        """The view of ``run``: the same settings, the run's ledger (made once per run)."""
        key = f"tools:{id(self)}"
        view = run.views.get(key)
        if view is None:
            view = self.calls.with_ledger(run.ledger)
            view = run.views.setdefault(key, view)  # two calls racing keep one view
        assert isinstance(view, ControlledToolCalls)
        return view

    def wrap(
        self, request: ToolCallRequest, execute: Callable[[ToolCallRequest], ToolResult], run: Run
    ) -> Any:
        """Run one tool call of ``run`` (``execute`` runs one attempt)."""
        return self.of(run).wrap(request, _counted(execute, run))

    async def awrap(
        self, request: ToolCallRequest, execute: Callable[[ToolCallRequest], Awaitable[ToolResult]], run: Run
    ) -> Any:
        """The async twin of :meth:`wrap`."""

        async def counted(req: ToolCallRequest) -> ToolResult:
            run.count("tool")
            return await execute(req)

        return await self.of(run).awrap(request, counted)


def _counted(
    execute: Callable[[ToolCallRequest], ToolResult], run: Run
) -> Callable[[ToolCallRequest], ToolResult]:
    def counted(req: ToolCallRequest) -> ToolResult:
        run.count("tool")
        return execute(req)

    return counted
