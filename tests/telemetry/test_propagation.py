"""The gateway passes the trace on: its upstream requests carry a ``traceparent`` (adaptive ones under
their attempt span, proxied ones the caller's), read here by a real HTTP upstream on 127.0.0.1."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from retryctl.gateway import Gateway, GatewayConfig
from retryctl.telemetry import names
from tests.gateway._support import adaptive
from tests.telemetry._spans import children, finished, one
from tests.telemetry.test_gateway import PARENT_ID, TRACE_ID, TRACEPARENT, _post

_TOKENS = ["The", " answer", " is", " 42", "."]


class _Recorder(BaseHTTPRequestHandler):
    seen: list[str | None]

    def do_POST(self) -> None:
        length = int(self.headers.get("content-length") or 0)
        n = int(json.loads(self.rfile.read(length) or b"{}").get("n") or 1)
        self.seen.append(self.headers.get("traceparent"))
        logprobs = {"content": [{"token": t, "logprob": -0.01, "top_logprobs": []} for t in _TOKENS]}
        choice = {"message": {"role": "assistant", "content": "".join(_TOKENS)}, "finish_reason": "stop"}
        body = json.dumps(
            {
                "id": "rec",
                "object": "chat.completion",
                "model": "m",
                "choices": [{"index": i, **choice, "logprobs": logprobs} for i in range(n)],
                "usage": {"prompt_tokens": 20, "completion_tokens": 5 * n, "total_tokens": 20 + 5 * n},
            }
        ).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def upstream() -> Iterator[tuple[str, list[str | None]]]:
    """A real chat-completions server on 127.0.0.1 recording each request's ``traceparent``."""
    seen: list[str | None] = []
    handler = type("Handler", (_Recorder,), {"seen": seen})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1", seen
    finally:
        server.shutdown()
        server.server_close()


def _gateway(url: str, provider: TracerProvider | None) -> Gateway:
    cfg = GatewayConfig(
        upstream=url, upstream_model="m", model_name="scripted", calibration="none", retries=1
    )
    return Gateway(cfg, tracer_provider=provider)


def _parts(traceparent: str | None) -> tuple[str, str]:
    assert traceparent is not None
    _version, trace_id, parent_id, _flags = traceparent.split("-")
    return trace_id, parent_id


class TestTheUpstreamJoinsTheTrace:
    def test_an_adaptive_request_passes_its_attempt_on(
        self, upstream: tuple[str, list[str | None]], provider: TracerProvider, exporter: InMemorySpanExporter
    ) -> None:
        url, seen = upstream
        gateway = _gateway(url, provider)
        response = _post(gateway, adaptive(min_samples=1, max_samples=1), {"traceparent": TRACEPARENT})
        assert response.status_code == 200, response.text
        spans = finished(exporter)
        (attempt,) = children(spans, one(spans, f"{names.SPAN_STEP} chat.completions"))
        assert attempt.context is not None
        (sent,) = seen
        # The upstream's request is a child of the attempt that made it, in the caller's trace.
        assert _parts(sent) == (TRACE_ID, format(attempt.context.span_id, "016x"))

    def test_a_proxied_request_passes_the_callers_trace_on(
        self, upstream: tuple[str, list[str | None]], provider: TracerProvider, exporter: InMemorySpanExporter
    ) -> None:
        url, seen = upstream
        gateway = _gateway(url, provider)
        body = {"model": "scripted", "messages": [{"role": "user", "content": "hi"}]}
        assert _post(gateway, body, {"traceparent": TRACEPARENT}).status_code == 200
        assert finished(exporter) == []  # a proxied request is judged by nobody: no span of retryctl's
        (sent,) = seen
        assert _parts(sent) == (TRACE_ID, PARENT_ID)

    def test_nothing_is_sent_when_nothing_is_traced(self, upstream: tuple[str, list[str | None]]) -> None:
        url, seen = upstream
        body = {"model": "scripted", "messages": [{"role": "user", "content": "hi"}]}
        assert _post(_gateway(url, None), body, {}).status_code == 200
        assert _post(_gateway(url, None), adaptive(min_samples=1, max_samples=1), {}).status_code == 200
        assert seen == [None, None]
