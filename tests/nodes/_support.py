"""Helpers shared by the nodes tests."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from retryctl.nodes import ControlledToolNode
from retryctl.testing import CapturedRun

Runner = Callable[..., CapturedRun]
"""Runs a graph (sync or async, per the ``run`` fixture) and captures what it emitted."""


class Sleeps:
    """Records requested sleeps instead of sleeping, with a sync and an async face."""

    def __init__(self) -> None:
        self.waits: list[float] = []

    def __call__(self, seconds: float) -> None:
        self.waits.append(seconds)

    async def asleep(self, seconds: float) -> None:
        self.waits.append(seconds)


class RateLimited(Exception):
    """An HTTP 429 in the shape classify() reads duck-typed: a status code and response headers."""

    def __init__(self, retry_after: str) -> None:
        super().__init__("429 Too Many Requests")
        self.status_code = 429
        self.response = type("Response", (), {"status_code": 429, "headers": {"retry-after": retry_after}})()


def user(text: str) -> dict[str, Any]:
    """A state with one user message."""
    return {"messages": [{"role": "user", "content": text}]}


class StreamingToolNode(ControlledToolNode):
    """``ControlledToolNode`` with its verdicts on the custom stream (off by default), which
    ``capture_verdicts`` reads."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, stream_events=True, **kwargs)
