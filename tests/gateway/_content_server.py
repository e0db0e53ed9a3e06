"""A real HTTP server on 127.0.0.1 that answers by a request's content, as llama.cpp's server does: a
conversation with a ``tool`` message gets a 500 listing validation errors (the same words every time),
a body with ``"user": "refuse-400"`` a 400 in OpenAI's shape, ``"user": "refuse-422"`` a 422 in plain
text, a message whose content starts ``crash-500`` a 500 in prose (:data:`CRASH_500`, the same words
every time, naming no parameter), anything else a completion. ``mode`` turns it into an unhealthy
upstream: ``down`` answers every request 503, ``dead`` every request the same 500, ``flaky`` every
request a 500 that says something else each time (a server failing as it goes). It counts the
requests of each kind it answered."""

from __future__ import annotations

import json
import threading
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Literal

from tests.models._fault_server import completion

TOOL_500 = (
    "7 validation errors: {'type': 'literal_error', 'loc': ('body', 'messages', 1, "
    "'ChatCompletionRequestSystemMessage', 'role'), 'msg': \"Input should be 'system'\"}"
)
"""What llama.cpp's Python server answers a valid tool-call conversation with (its first words)."""

CRASH_500 = "the chat template failed to render this conversation"
"""What the server answers a message starting ``crash-500`` with: a 500 of the request's own, in prose."""

Mode = Literal["ok", "down", "dead", "flaky"]


def kind(request: dict[str, Any]) -> str:
    """Which kind of request this is: ``check`` (the gateway's own), ``tool``, ``crash``, ``refuse-400``,
    ``refuse-422`` or ``plain``."""
    messages = request.get("messages") or []
    if request.get("max_tokens") == 1 and messages == [{"role": "user", "content": "Say OK."}]:
        return "check"
    roles = {m.get("role") for m in messages if isinstance(m, dict)}
    if "tool" in roles:
        return "tool"
    if any(isinstance(m, dict) and str(m.get("content")).startswith("crash-500") for m in messages):
        return "crash"
    if request.get("user") in ("refuse-400", "refuse-422"):
        return str(request["user"])
    return "plain"


class ContentServer:
    """The server; ``hits`` counts the requests it answered by :func:`kind`."""

    def __init__(self) -> None:
        self.mode: Mode = "ok"
        self.hits: Counter[str] = Counter()
        self._lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def _send(self, code: int, body: bytes, content_type: str = "application/json") -> None:
                self.send_response(code)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_POST(self) -> None:
                request = json.loads(self.rfile.read(int(self.headers.get("Content-Length", "0"))))
                found = kind(request)
                with server._lock:
                    server.hits[found] += 1
                    answered = sum(server.hits.values())
                if server.mode == "down":
                    self._send(503, _error("the server is overloaded", "server_error"))
                elif server.mode == "flaky":
                    self._send(500, _error(f"worker {answered} crashed", "server_error"))
                elif found == "crash":
                    self._send(500, _error(CRASH_500, "server_error"))
                elif server.mode == "dead" or found == "tool":
                    self._send(500, _error(TOOL_500 if found == "tool" else "engine dead", "server_error"))
                elif found == "refuse-400":
                    self._send(400, _error("messages: too long for the context", "invalid_request_error"))
                elif found == "refuse-422":
                    self._send(422, b"Unprocessable: user is not allowed", "text/plain")
                else:
                    self._send(200, completion(int(request.get("n") or 1)))

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )

    @property
    def url(self) -> str:
        """Its /v1 URL."""
        return f"http://127.0.0.1:{self._httpd.server_address[1]}/v1"

    def start(self) -> ContentServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()


def _error(message: str, type: str) -> bytes:
    return json.dumps({"error": {"message": message, "type": type, "param": None, "code": None}}).encode()
