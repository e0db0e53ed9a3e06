"""Real LangChain tools that misbehave on purpose: they raise, hang, return the wrong type, return
megabytes, or fail a few times before they work. Each has a sync and an async body, so the same tool
runs under ``graph.invoke`` and ``graph.ainvoke``.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from typing import Any

from langchain_core.tools import BaseTool, StructuredTool
from pydantic import BaseModel, Field

__all__ = ["HUGE_BYTES", "WRONG_TYPE_VALUES", "FaultyTools", "Poisoned", "RateLimited"]

HUGE_BYTES = 10 * 1024 * 1024
"""What a huge tool returns: 10 MiB of text."""


class RateLimited(Exception):
    """An HTTP 429 as a client library raises it: ``status_code`` and response headers, read duck-typed."""

    def __init__(self, retry_after_s: float) -> None:
        super().__init__(f"429 Too Many Requests (Retry-After: {retry_after_s:g})")
        self.status_code = 429
        headers = {"retry-after": f"{retry_after_s:g}"}
        self.response = type("Response", (), {"status_code": 429, "headers": headers})()


class Poisoned:
    """A return value that cannot be shown: both ``json.dumps`` and ``str()`` fail on it."""

    def __str__(self) -> str:
        raise RuntimeError("this object refuses to be printed")

    __repr__ = __str__


WRONG_TYPE_VALUES: dict[str, Callable[[], Any]] = {
    "none": lambda: None,
    "int": lambda: 42,
    "nested_dict": lambda: {"answer": [1, {"deep": None}], "ok": True},
    "bytes": lambda: b"\x00\xff binary",
    "set": lambda: {1, 2, 3},
    "nan": lambda: float("nan"),
    "list_of_non_blocks": lambda: [{"no": "type"}, 3],
    "poisoned": Poisoned,
}
"""Values a tool declared ``-> str`` returns instead, by a short name."""


class Query(BaseModel):
    """The one argument every faulty tool takes."""

    query: str = Field(description="What to look up.")


class FaultyTools:
    """Makes faulty tools that count their calls by name and share one ``release`` event.

    A hanging tool waits on ``release`` (at most ``hang_s``), so a test's teardown can free the
    threads a timed-out sync call leaves behind instead of leaving them asleep.
    """

    def __init__(self) -> None:
        self.calls: dict[str, int] = {}
        self.release = threading.Event()
        self.down: set[str] = set()
        """Names of :meth:`outage` tools that currently fail."""
        self._lock = threading.Lock()

    def count(self, name: str) -> int:
        """Calls of ``name`` so far (a refused call never reaches the tool and is not counted)."""
        with self._lock:
            return self.calls.get(name, 0)

    def _called(self, name: str) -> int:
        with self._lock:
            self.calls[name] = self.calls.get(name, 0) + 1
            return self.calls[name]

    def _tool(
        self, name: str, body: Callable[[int], Any], abody: Callable[[int], Any] | None = None
    ) -> BaseTool:
        def func(query: str) -> Any:
            return body(self._called(name))

        async def coroutine(query: str) -> Any:
            n = self._called(name)
            return await abody(n) if abody is not None else body(n)

        return StructuredTool.from_function(
            func=func,
            coroutine=coroutine,
            name=name,
            description=f"A deliberately faulty tool ({name}).",
            args_schema=Query,
        )

    def ok(self, name: str, result: str = "42") -> BaseTool:
        """A tool that works."""
        return self._tool(name, lambda _n: result)

    def raising(self, name: str, make: Callable[[], BaseException]) -> BaseTool:
        """A tool that raises ``make()`` on every call."""

        def body(_n: int) -> Any:
            raise make()

        return self._tool(name, body)

    def flaky(
        self, name: str, failures: int, make: Callable[[], BaseException], result: str = "42"
    ) -> BaseTool:
        """A tool whose first ``failures`` calls raise ``make()``; later calls return ``result``."""

        def body(n: int) -> Any:
            if n <= failures:
                raise make()
            return result

        return self._tool(name, body)

    def hanging(self, name: str, hang_s: float = 30.0) -> BaseTool:
        """A tool that does not answer for ``hang_s`` seconds (far beyond any timeout under test)."""

        def body(_n: int) -> Any:
            self.release.wait(hang_s)
            return "too late"

        async def abody(_n: int) -> Any:
            await asyncio.sleep(hang_s)
            return "too late"

        return self._tool(name, body, abody)

    def wrong_type(self, name: str, kind: str) -> BaseTool:
        """A tool declared to return text that returns ``WRONG_TYPE_VALUES[kind]()`` instead."""
        make = WRONG_TYPE_VALUES[kind]
        return self._tool(name, lambda _n: make())

    def huge(self, name: str, size: int = HUGE_BYTES) -> BaseTool:
        """A tool that returns ``size`` bytes of text."""
        return self._tool(name, lambda _n: "x" * size)

    def outage(self, name: str, result: str = "42") -> BaseTool:
        """A tool that fails with ``ConnectionError`` while its name is in ``down``, else answers."""

        def body(_n: int) -> Any:
            if name in self.down:
                raise ConnectionError(f"{name} is down")
            return result

        return self._tool(name, body)

    def gated(self, name: str, gate: threading.Event, wait_s: float = 10.0) -> BaseTool:
        """A tool that answers only once ``gate`` is set (or ``wait_s`` passed: then it says so)."""

        def body(_n: int) -> Any:
            return "42" if gate.wait(wait_s) else "gate never opened"

        async def abody(_n: int) -> Any:
            return "42" if await asyncio.to_thread(gate.wait, wait_s) else "gate never opened"

        return self._tool(name, body, abody)

    def opener(self, name: str, gate: threading.Event) -> BaseTool:
        """A tool that sets ``gate`` and answers."""

        def body(_n: int) -> Any:
            gate.set()
            return "42"

        return self._tool(name, body)
