"""A real HTTP server on 127.0.0.1 that refuses some OpenAI parameters the way real servers do.

It answers what it accepts with a chat completion whose content :attr:`PickyServer.reply` computes from
the request, and refuses the rest with the error body of a real server (``LLAMA_CPP_JSON_SCHEMA_500`` is
what ``python -m llama_cpp.server`` 0.3.x answers to ``response_format: {"type": "json_schema"}``).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

LLAMA_CPP_JSON_SCHEMA_500 = json.dumps(
    {
        "error": {
            "message": "1 validation error:\n  {'type': 'literal_error', 'loc': ('body', 'response_format', "
            "'type'), 'msg': \"Input should be 'text' or 'json_object'\", 'input': 'json_schema', 'ctx': "
            "{'expected': \"'text' or 'json_object'\"}}\n\n  File \"/venv/lib/python3.11/site-packages/"
            'llama_cpp/server/app.py", line 376, in create_chat_completion\n    POST /v1/chat/completions',
            "type": "internal_server_error",
            "param": None,
            "code": None,
        }
    }
)
"""Captured from ``python -m llama_cpp.server`` (llama-cpp-python 0.3.36); only the venv path shortened."""

OPENAI_JSON_OBJECT_400 = json.dumps(
    {
        "error": {
            "message": "Invalid parameter: 'response_format' of type 'json_object' is not supported with "
            "this model.",
            "type": "invalid_request_error",
            "param": None,
            "code": None,
        }
    }
)
"""The OpenAI API's wording for a response format a model does not take."""

OPENAI_LOGPROBS_400 = json.dumps(
    {
        "error": {
            "message": "Unsupported parameter: 'logprobs' is not supported with this model.",
            "type": "invalid_request_error",
            "param": "logprobs",
            "code": "unsupported_parameter",
        }
    }
)
"""The OpenAI API's wording for a parameter a model does not take."""


@dataclass(frozen=True)
class Refusal:
    """An error a picky server answers with."""

    status: int
    body: str


def mode_of(request: dict[str, Any]) -> str:
    """The structured-output mode a request was sent in, as the backend names them."""
    fmt = request.get("response_format")
    if fmt is None:
        return "tools" if "tools" in request else "prompt"
    if fmt.get("type") == "json_object":
        return "json_object+schema" if "schema" in fmt else "json_object"
    return str(fmt.get("type"))


class PickyServer:
    """Refuses requests by :attr:`refuse` (a check of the request returning a :class:`Refusal` or
    ``None``); answers the others with :attr:`reply`'s content. Records every request."""

    def __init__(
        self,
        refuse: Callable[[dict[str, Any]], Refusal | None],
        reply: Callable[[dict[str, Any]], str],
    ) -> None:
        self.refuse = refuse
        self.reply = reply
        self.requests: list[dict[str, Any]] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", "0"))
                request = json.loads(self.rfile.read(length) or b"{}")
                server.requests.append(request)
                refusal = server.refuse(request)
                if refusal is not None:
                    self._send(refusal.status, refusal.body.encode())
                    return
                self._send(200, _completion(server.reply(request), request))

            def _send(self, code: int, body: bytes) -> None:
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._httpd.server_address[1]}/v1"

    def modes(self) -> list[str]:
        """The mode of every request received, in order."""
        return [mode_of(r) for r in self.requests]

    def start(self) -> PickyServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()


def _completion(content: str, request: dict[str, Any]) -> bytes:
    choice: dict[str, Any] = {
        "index": 0,
        "message": {"role": "assistant", "content": content},
        "finish_reason": "stop",
    }
    if request.get("logprobs"):
        choice["logprobs"] = {"content": [{"token": content, "logprob": -0.1, "top_logprobs": []}]}
    body = {
        "id": "picky",
        "object": "chat.completion",
        "model": request.get("model"),
        "choices": [choice],
        "usage": {"prompt_tokens": 20, "completion_tokens": 5, "total_tokens": 25},
    }
    return json.dumps(body).encode()
