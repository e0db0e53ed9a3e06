"""A real HTTP server on 127.0.0.1 that answers chat-completion requests with scripted faults."""

from __future__ import annotations

import contextlib
import json
import socket
import struct
import threading
from collections import deque
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Reply:
    """One scripted answer. ``kind`` picks the behaviour; see the module's helpers."""

    kind: str = "ok"
    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes = b""
    choices: int | None = None  # for "ok": None means as many as the request's n


def completion(n: int, *, text: str = "42", logprobs: bool = True, usage: bool = True) -> bytes:
    """A well-formed chat completion with n choices; choice i says f"{text}-{i}" as two tokens."""
    choices = []
    for i in range(n):
        tokens = [text, f"-{i}"]
        choice: dict[str, Any] = {
            "index": i,
            "message": {"role": "assistant", "content": "".join(tokens)},
            "finish_reason": "stop",
        }
        if logprobs:
            choice["logprobs"] = {
                "content": [
                    {
                        "token": t,
                        "logprob": -0.25 * (j + 1),
                        "top_logprobs": [
                            {"token": t, "logprob": -0.25 * (j + 1)},
                            {"token": "x", "logprob": -3.0},
                        ],
                    }
                    for j, t in enumerate(tokens)
                ]
            }
        choices.append(choice)
    body: dict[str, Any] = {"id": "c1", "object": "chat.completion", "model": "fault", "choices": choices}
    if usage:
        body["usage"] = {"prompt_tokens": 10, "completion_tokens": 2 * n, "total_tokens": 10 + 2 * n}
    return json.dumps(body).encode()


def ok(choices: int | None = None, **kwargs: Any) -> Reply:
    return Reply("ok", choices=choices, body=completion(choices or 1, **kwargs) if kwargs else b"")


def status(code: int, *, retry_after: str | None = None, message: str | None = None) -> Reply:
    """An error status in OpenAI's shape, saying ``message`` (by default ``scripted <code>``)."""
    headers = {"Retry-After": retry_after} if retry_after is not None else {}
    said = f"scripted {code}" if message is None else message
    body = json.dumps({"error": {"message": said, "type": "server_error"}}).encode()
    return Reply("status", status=code, headers=headers, body=body)


def raw(body: bytes, *, content_type: str = "application/json") -> Reply:
    return Reply("raw", body=body, headers={"Content-Type": content_type})


def hang() -> Reply:
    return Reply("hang")


def cut_connection() -> Reply:
    """Promise a long body, send a piece of it, close the connection."""
    return Reply("cut")


def reset() -> Reply:
    """Read the request, then reset the connection (a TCP RST: the client sees ECONNRESET)."""
    return Reply("reset")


class FaultServer:
    """Pops one scripted :class:`Reply` per request, GET or POST (then answers ``default``, ``ok`` unless
    given); records request bodies (a body that is not JSON as ``{"raw": text}``)."""

    def __init__(self, *, default: Reply | None = None) -> None:
        self.script: deque[Reply] = deque()
        self.default = default or Reply()
        self.requests: list[dict[str, Any]] = []
        self.release = threading.Event()
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def _send(self, code: int, body: bytes, headers: dict[str, str]) -> None:
                self.send_response(code)
                self.send_header("Content-Type", headers.pop("Content-Type", "application/json"))
                self.send_header("Content-Length", str(len(body)))
                for key, value in headers.items():
                    self.send_header(key, value)
                self.end_headers()
                self.wfile.write(body)

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", "0"))
                data = self.rfile.read(length) or b"{}"
                try:
                    request = json.loads(data)
                except ValueError:
                    request = {"raw": data.decode(errors="replace")}
                server.requests.append(request)
                reply = server.script.popleft() if server.script else server.default
                with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                    self._reply(reply, request)

            do_GET = do_POST

            def _reply(self, reply: Reply, request: dict[str, Any]) -> None:
                if reply.kind == "ok":
                    n = reply.choices or int(request.get("n") or 1)
                    self._send(200, reply.body or completion(n), {})
                elif reply.kind in ("status", "raw"):
                    self._send(reply.status, reply.body, dict(reply.headers))
                elif reply.kind == "hang":
                    server.release.wait(timeout=30)
                    self.close_connection = True
                elif reply.kind == "reset":
                    # SO_LINGER with a zero timeout: close() sends RST instead of FIN.
                    self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                    self.close_connection = True
                    self.connection.close()
                elif reply.kind == "cut":
                    body = completion(1)
                    self.send_response(200)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(body) + 500))
                    self.end_headers()
                    self.wfile.write(body[:40])
                    self.wfile.flush()
                    self.close_connection = True
                    self.connection.shutdown(socket.SHUT_RDWR)

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        # A short poll interval: shutdown() waits for the loop's next poll.
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._httpd.server_address[1]}/v1"

    def start(self) -> FaultServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self.release.set()
        self._httpd.shutdown()
        self._httpd.server_close()
