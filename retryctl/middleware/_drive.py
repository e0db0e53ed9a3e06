"""The sync and async drivers of a model-call flow (:meth:`~._models.ModelCalls.flow`): they only call
the handler and sleep; every decision is the flow's. The async one gives a batch's turn up at its
awaits (the model call and the backoff), as every driver does."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from langchain.agents.middleware.types import ModelRequest, ModelResponse
from langgraph.errors import GraphBubbleUp

from retryctl._turn import yielded_turn
from retryctl.middleware._models import Flow

__all__ = ["adrive", "drive"]


def drive(
    flow: Flow, handler: Callable[[ModelRequest[Any]], ModelResponse[Any]], sleep: Callable[[float], None]
) -> ModelResponse[Any]:
    """Run ``flow``: call ``handler`` for each request, ``sleep`` for each wait."""
    sent: ModelResponse[Any] | BaseException | None = None
    while True:
        try:
            step = flow.send(sent)
        except StopIteration as done:
            result: ModelResponse[Any] = done.value
            return result
        if isinstance(step, float | int):
            sleep(float(step))
            sent = None
            continue
        try:
            sent = handler(step)
        except GraphBubbleUp:
            flow.close()  # its open blocks (the attempt's span) end here, in this context, not at GC
            raise
        except Exception as exc:
            sent = exc
        except BaseException:  # interrupted: as above
            flow.close()
            raise


async def adrive(
    flow: Flow,
    handler: Callable[[ModelRequest[Any]], Awaitable[ModelResponse[Any]]],
    asleep: Callable[[float], Awaitable[None]],
) -> ModelResponse[Any]:
    """The async twin of :func:`drive`."""
    sent: ModelResponse[Any] | BaseException | None = None
    while True:
        try:
            step = flow.send(sent)
        except StopIteration as done:
            result: ModelResponse[Any] = done.value
            return result
        if isinstance(step, float | int):
            async with yielded_turn():  # a batch's other tasks run while this one waits
                await asleep(float(step))
            sent = None
            continue
        try:
            async with yielded_turn():
                sent = await handler(step)
        except GraphBubbleUp:
            flow.close()
            raise
        except Exception as exc:
            sent = exc
        except BaseException:  # cancelled
            flow.close()
            raise
