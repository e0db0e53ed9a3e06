"""A ``ToolNode`` that runs a step's single tool call in the node's own thread.

``ToolNode`` hands the calls of a step to a fresh thread pool even when there is only one: every
step starts a thread, and all the work in it (the tool, and the controller wrapped round it) runs
on a cold thread, two to three times slower than the same code in a warm one
(``bench/controller_overhead.py`` measures it). With one call there is nothing to run in parallel,
so :class:`InlineToolNode` runs it in place, in a copy of the current context exactly as the pool's
``ContextThreadPoolExecutor.map`` would. Several calls take ToolNode's own path, and so does a
thread with a running event loop (a sync tool may call ``asyncio.run``, which a running loop in the
same thread forbids; the pool's worker has none). The async path (``ainvoke``) has no pool and is
unchanged.

This overrides ToolNode's private ``_func`` and builds the ``ToolRuntime`` the way ToolNode does;
``tests/nodes/test_tool_node_inline.py`` pins both against the installed langgraph, so a change
there fails a test instead of silently dropping a runtime field.
"""

from __future__ import annotations

import asyncio
import contextvars
from typing import Any, cast

from langchain_core.messages import AnyMessage
from langchain_core.runnables import RunnableConfig
from langchain_core.runnables.config import get_config_list
from langgraph.prebuilt import ToolNode
from langgraph.prebuilt.tool_node import ToolRuntime
from langgraph.runtime import Runtime
from pydantic import BaseModel

__all__ = ["RUNTIME_FIELDS", "InlineToolNode"]

RUNTIME_FIELDS = frozenset(
    {
        "state",
        "tool_call_id",
        "config",
        "context",
        "store",
        "stream_writer",
        "tools",
        "execution_info",
        "server_info",
    }
)
"""The ``ToolRuntime`` fields :meth:`InlineToolNode._func` fills (all of them, as ToolNode does)."""


def _loop_running() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


class InlineToolNode(ToolNode):
    """``ToolNode``, with a single tool call run in the calling thread (see the module docstring)."""

    def _func(
        self,
        input: list[AnyMessage] | dict[str, Any] | BaseModel,
        config: RunnableConfig,
        runtime: Runtime[Any],
    ) -> Any:
        tool_calls, input_type = self._parse_input(input)
        if len(tool_calls) != 1 or _loop_running():
            return super()._func(input, config, runtime)
        [call] = tool_calls
        [cfg] = get_config_list(config, 1)
        tool_runtime = ToolRuntime(
            state=self._extract_state(input, cfg),
            tool_call_id=call["id"],
            config=cfg,
            context=runtime.context,
            store=runtime.store,
            stream_writer=runtime.stream_writer,
            tools=list(self.tools_by_name.values()),
            execution_info=runtime.execution_info,
            server_info=runtime.server_info,
        )
        output = contextvars.copy_context().run(
            self._run_one, call, input_type, cast("ToolRuntime", tool_runtime)
        )
        return self._combine_tool_outputs([output], input_type)
