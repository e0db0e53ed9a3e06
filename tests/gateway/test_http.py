"""The gateway's uvicorn protocol: what one response writes in one step of the loop leaves as one write,
in order, and nothing written before a close is lost. The protocol runs the real gateway app (uvicorn's
httptools parser, Starlette); only the socket is replaced, by a transport that records each write the
kernel would have sent as a segment."""

from __future__ import annotations

import asyncio
from typing import Any

import orjson
from uvicorn import Config
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
from uvicorn.server import ServerState

from retryctl.gateway import GatewayConfig, create_app
from retryctl.gateway._http import CoalescingHttpToolsProtocol
from tests.gateway._support import chat


class RecordingTransport(asyncio.Transport):
    def __init__(self) -> None:
        super().__init__()
        self.writes: list[bytes] = []
        self.closed = False

    def write(self, data: Any) -> None:
        assert not self.closed, "written after close"
        self.writes.append(bytes(data))

    def close(self) -> None:
        self.closed = True

    def is_closing(self) -> bool:
        return self.closed

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return {"peername": ("127.0.0.1", 50000), "sockname": ("127.0.0.1", 8080)}.get(name, default)

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass


async def _answer(protocol_class: type[HttpToolsProtocol], request: bytes) -> RecordingTransport:
    app = create_app(GatewayConfig(upstream="http://127.0.0.1:9/v1", upstream_model="m"))
    config = Config(app, http=protocol_class, lifespan="off", log_level="warning")
    protocol = protocol_class(config=config, server_state=ServerState(), app_state={})
    transport = RecordingTransport()
    protocol.connection_made(transport)
    protocol.data_received(request)
    async with asyncio.timeout(10):
        while protocol.cycle is None or not protocol.cycle.response_complete:
            await asyncio.sleep(0.001)
    await asyncio.sleep(0)  # the step in which the held writes are sent
    return transport


HEALTH = b"GET /health HTTP/1.1\r\nHost: gateway\r\n\r\n"


class TestCoalescing:
    def test_uvicorns_own_protocol_writes_head_and_body_apart(self) -> None:
        # What the gateway's protocol is for: without it, two writes and two segments.
        assert len(asyncio.run(_answer(HttpToolsProtocol, HEALTH)).writes) == 2

    def test_head_and_body_leave_as_one_write(self) -> None:
        transport = asyncio.run(_answer(CoalescingHttpToolsProtocol, HEALTH))
        [only] = transport.writes
        head, _, body = only.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 200")
        assert orjson.loads(body)["status"] == "ok"

    def test_an_error_answer_is_whole_and_in_order_too(self) -> None:
        body = orjson.dumps(chat(model="no-such-model"))
        request = (
            b"POST /v1/chat/completions HTTP/1.1\r\nHost: gateway\r\ncontent-type: application/json\r\n"
            b"content-length: %d\r\n\r\n%s" % (len(body), body)
        )
        [only] = asyncio.run(_answer(CoalescingHttpToolsProtocol, request)).writes
        head, _, answer = only.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 404")
        assert orjson.loads(answer)["error"]["code"] == "model_not_found"

    def test_what_was_written_before_a_close_is_sent_before_it(self) -> None:
        request = b"GET /health HTTP/1.1\r\nHost: gateway\r\nConnection: close\r\n\r\n"
        transport = asyncio.run(_answer(CoalescingHttpToolsProtocol, request))
        assert transport.closed
        [only] = transport.writes
        assert b"connection: close" in only.lower() and only.endswith(b'"max_concurrency":64}')
