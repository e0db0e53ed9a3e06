"""A bound on one tool call's wall time (``timeout_s``), sync and async."""

from __future__ import annotations

import asyncio
import contextvars
import threading
from collections.abc import Awaitable, Callable
from typing import Any, ClassVar, TypeVar

from retryctl.exceptions import RetryctlError

__all__ = ["AbandonedCall", "awithin", "overran", "within"]

_R = TypeVar("_R")
_A = TypeVar("_A")


def overran(timeout_s: float) -> TimeoutError:
    """The error of a call that did not answer in time (a transient fault)."""
    return TimeoutError(f"the tool did not answer within timeout_s={timeout_s:g}")


class AbandonedCall(RetryctlError):
    """A sync call of a non-idempotent tool given up after ``timeout_s``: its thread cannot be stopped
    and may still complete the call's effect, so the call is never run again (terminal)."""

    error_class: ClassVar[str | None] = "terminal"


def within(
    timeout_s: float | None, execute: Callable[[_A], _R], request: _A, *, idempotent: bool = True
) -> _R:
    """``execute(request)``, given up after ``timeout_s``: it runs in a daemon thread (with this
    thread's context, which carries LangGraph's config) that is abandoned if it overruns.

    A thread cannot be cancelled: the abandoned call may still finish, and its effect with it. A retry
    of it would run beside it, so an overrun of a non-idempotent tool is :class:`AbandonedCall`
    (never retried); of any other tool a ``TimeoutError`` that says the call was abandoned."""
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
        if not idempotent:
            raise AbandonedCall(
                f"the tool did not answer within timeout_s={timeout_s:g} and was abandoned, still "
                "running: it is not idempotent, so it is not run again beside it"
            )
        raise TimeoutError(
            f"the tool did not answer within timeout_s={timeout_s:g} (abandoned, still running)"
        )
    finished, value = outcome[0]
    if not finished:
        raise value
    result: _R = value
    return result


async def awithin(timeout_s: float | None, call: Awaitable[_R]) -> _R:
    """``await call``, cancelled after ``timeout_s``; a ``TimeoutError`` the tool raised itself passes."""
    scope = asyncio.timeout(timeout_s)
    try:
        async with scope:
            return await call
    except TimeoutError as exc:
        if scope.expired():
            raise overran(timeout_s or 0.0) from exc
        raise
