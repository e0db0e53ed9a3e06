"""How retryctl's node functions become LangGraph nodes: cheaply, and without a thread hop under ``ainvoke``.

``StateGraph.add_node`` wraps a plain sync function so that, under ``ainvoke``, every call is sent to a
worker thread (``run_in_executor``); a ``RunnableLambda`` does the same and also re-inspects the
function's signature and opens a traced run on every call. For nodes that only move state and call
``decide`` (microseconds of work) that costs more than the node itself, and in a batch of 64 concurrent
tasks the hops queue on the default pool of ``cpu + 4`` threads and contend for the GIL. A node built here
runs its sync function inline on the event loop, inspects signatures once, and is traced by LangGraph's
own task tracing like any function node (``trace=False``, as ``add_node`` does for functions).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

# LangGraph's own node wrapper (``ToolNode`` is one), public in spirit but not exported: the only way to
# give LangGraph a sync function and its async twin together. langgraph-prebuilt (ToolNode,
# create_react_agent) imports it from this same module, so it moves only with LangGraph itself;
# pinned by ``langgraph>=1,<2``.
from langgraph._internal._runnable import RunnableCallable

__all__ = ["twin_node"]


def twin_node(
    func: Callable[..., Any], afunc: Callable[..., Awaitable[Any]] | None = None, *, name: str
) -> RunnableCallable:
    """A node running ``func`` under ``invoke`` and ``afunc`` under ``ainvoke``; without ``afunc``,
    ``func`` inline on the event loop (so give one to any node that blocks: sleeps, network, threads)."""
    if afunc is None:

        async def inline(*args: Any, **kwargs: Any) -> Any:
            return func(*args, **kwargs)

        afunc = inline
    return RunnableCallable(func, afunc, name=name, trace=False)
