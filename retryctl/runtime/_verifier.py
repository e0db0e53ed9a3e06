"""A user's verifier, run with a time limit: a verifier that hangs or raises must not take the step with it.

The sync twin runs the verifier in a small shared thread pool and stops waiting at ``timeout_s`` (the
thread is left to finish: Python cannot kill it); the async twin awaits the coroutine under
``asyncio.wait_for``. Either way the result is a :class:`~retryctl.controller.Signal`: the score, or an
unavailable signal saying why there is none (a raise, a timeout, a score that is not a number in [0, 1]).
Here and not in the controller because a thread pool is I/O's machinery: the controller stays pure.
"""

from __future__ import annotations

import asyncio
import math
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout

from retryctl.controller._signals import AsyncVerifier, Signal, Verifier

__all__ = ["averify", "verify"]


def _verifier_signal(score: object) -> Signal:
    # Shared by the sync and async twins: interpret whatever the user's verifier returned.
    if isinstance(score, bool) or not isinstance(score, int | float):
        return Signal.unavailable("verifier", f"verifier returned {type(score).__name__}, not a float")
    if math.isnan(score) or not 0.0 <= score <= 1.0:
        return Signal.unavailable("verifier", f"verifier returned {score!r}, outside [0, 1]")
    return Signal("verifier", float(score))


def _verifier_failed(exc: BaseException, timeout_s: float) -> Signal:
    if isinstance(exc, TimeoutError | FutureTimeout):
        return Signal.unavailable("verifier", f"verifier timed out after {timeout_s:g}s")
    return Signal.unavailable("verifier", f"verifier raised {type(exc).__name__}: {exc}")


# One shared worker pool for sync verifiers: a verifier that hangs must not hang the step with it.
_VERIFIER_POOL = ThreadPoolExecutor(max_workers=4, thread_name_prefix="retryctl-verifier")


def verify(verifier: Verifier | None, answer: str, *, timeout_s: float = 10.0) -> Signal:
    """Run a sync verifier with a timeout; a raise, a timeout or a bad score becomes an unavailable signal."""
    if verifier is None:
        return Signal.unavailable("verifier", "no verifier configured")
    future = _VERIFIER_POOL.submit(verifier, answer)
    try:
        return _verifier_signal(future.result(timeout=timeout_s))
    except Exception as exc:
        future.cancel()
        return _verifier_failed(exc, timeout_s)


async def averify(verifier: AsyncVerifier | None, answer: str, *, timeout_s: float = 10.0) -> Signal:
    """Async twin of :func:`verify` for coroutine verifiers."""
    if verifier is None:
        return Signal.unavailable("verifier", "no verifier configured")
    try:
        reply = await asyncio.wait_for(verifier(answer), timeout=timeout_s)
        return _verifier_signal(reply)
    except Exception as exc:
        return _verifier_failed(exc, timeout_s)
