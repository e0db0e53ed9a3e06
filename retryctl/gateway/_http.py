"""uvicorn's httptools protocol, sending what one response writes in one step of the event loop as one
``send``: its head and a short body in one TCP segment.

uvicorn writes a response's status line and headers as soon as the app sends ``http.response.start``,
and its body on ``http.response.body``: two ``send`` calls, two segments (TCP_NODELAY is set), so the
caller's event loop wakes for the head and again for the body. Measured through the gateway at
concurrency 1 (``bench/gateway_throughput.py``), that second wake-up was about 0.5 ms of the latency it
added. uvicorn has no option for it (aiohttp coalesces the two itself), so this holds the writes of one
loop step and sends them joined when the step ends: a Starlette response sends its head and body
without yielding to the loop, and a stream's chunks, each sent in its own step, still go out one by one
and at once.
"""

from __future__ import annotations

import asyncio
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

__all__ = ["CoalescingHttpToolsProtocol"]


class _CoalescingTransport:
    """A transport whose writes within one step of the loop go to the real one as one write."""

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        self._transport = transport
        self._loop = loop
        self._pending: list[bytes] = []

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if not self._pending:
            self._loop.call_soon(self._flush)
        self._pending.append(bytes(data))

    def writelines(self, lines: Any) -> None:
        for line in lines:
            self.write(line)

    def _flush(self) -> None:
        pending, self._pending = self._pending, []
        if pending and not self._transport.is_closing():
            self._transport.write(pending[0] if len(pending) == 1 else b"".join(pending))

    def close(self) -> None:
        self._flush()  # what was written before the close still goes out, in order
        self._transport.close()

    def __getattr__(self, name: str) -> Any:
        # Everything else (is_closing, get_extra_info, pause_reading, set_protocol, ...) is the
        # real transport's.
        return getattr(self._transport, name)


class CoalescingHttpToolsProtocol(HttpToolsProtocol):
    """uvicorn's ``--http httptools`` protocol over a :class:`_CoalescingTransport`."""

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        coalescing = _CoalescingTransport(transport, self.loop)
        super().connection_made(coalescing)  # type: ignore[arg-type]
