"""The gateway's spans: an adaptive request continues the caller's trace (its ``traceparent``)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import httpx
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from retryctl.audit import DecisionLog, read_records
from retryctl.gateway import EmbeddedUpstream, Gateway, create_app
from retryctl.models import ScriptedBackend, TransientBackendError
from retryctl.telemetry import names
from tests.gateway._support import adaptive, config
from tests.telemetry._spans import attrs, children, evaluation, finished, one

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT_ID = "00f067aa0ba902b7"
TRACEPARENT = f"00-{TRACE_ID}-{PARENT_ID}-01"


def _post(gateway: Gateway, body: dict[str, Any], headers: dict[str, str]) -> httpx.Response:
    async def go() -> httpx.Response:
        transport = httpx.ASGITransport(app=create_app(gateway.config, gateway=gateway))
        try:
            async with httpx.AsyncClient(transport=transport, base_url="http://gateway") as client:
                return await client.post("/v1/chat/completions", json=body, headers=headers)
        finally:
            await gateway.aclose()

    return asyncio.run(go())


def _gateway(script: list[Any], provider: TracerProvider, log: DecisionLog | None = None) -> Gateway:
    backend = ScriptedBackend(script, confidence=0.95)
    upstream = EmbeddedUpstream(backend, name="scripted")
    return Gateway(config(), upstream=upstream, log=log, tracer_provider=provider)


class TestGatewaySpans:
    def test_an_adaptive_request_joins_the_incoming_trace(
        self, tmp_path: Path, provider: TracerProvider, exporter: InMemorySpanExporter
    ) -> None:
        fault = TransientBackendError("HTTP 503: busy", backend="scripted", status_code=503)
        log = DecisionLog(tmp_path / "log.jsonl")
        gateway = _gateway([fault, "The answer is 42.", "The answer is 42."], provider, log)
        body = adaptive(min_samples=2, max_samples=2)
        response = _post(gateway, body, {"traceparent": TRACEPARENT})
        assert response.status_code == 200
        assert response.json()["retryctl"]["verdict"] == "accept"
        spans = finished(exporter)

        request = one(spans, f"{names.SPAN_STEP} chat.completions")
        assert request.context is not None and request.parent is not None
        assert format(request.context.trace_id, "032x") == TRACE_ID
        assert format(request.parent.span_id, "016x") == PARENT_ID
        assert request.parent.is_remote
        assert attrs(request)[names.OPERATION_NAME] == "chat"
        assert attrs(request)[names.REQUEST_MODEL] == "scripted"
        assert attrs(request)[names.ACTION] == "accept"
        assert attrs(request)[names.RUN_ID] == response.headers["x-retryctl-run-id"]

        retried, answered = children(spans, request)
        assert retried.name == answered.name == "scripted"
        assert evaluation(retried)[names.EVALUATION_SCORE_LABEL] == "retry"
        assert attrs(retried)[names.ERROR_TYPE] == "transient"
        accepted = evaluation(answered)
        assert accepted[names.EVALUATION_SCORE_LABEL] == "accept"
        assert accepted[names.EVALUATION_SCORE_VALUE] == response.json()["retryctl"]["confidence"]
        assert attrs(answered)[names.STOPPING_RULE]
        assert attrs(answered)[names.BUDGET_USED + "samples"] == 2
        # What each attempt charged, as the conventions' usage: the response's usage is their sum.
        usage = response.json()["usage"]
        charged = sum(attrs(s).get(names.OUTPUT_TOKENS, 0) for s in (retried, answered))
        assert charged == usage["completion_tokens"] > 0
        assert names.OUTPUT_TOKENS not in attrs(retried)  # the failed call was charged no tokens
        verdicts = [r for r in read_records(tmp_path / "log.jsonl") if r.kind == "verdict"]
        assert [attrs(s)[names.RECORD_HASH] for s in (retried, answered)] == [r.hash for r in verdicts]

    def test_without_a_traceparent_the_request_starts_a_trace(
        self, provider: TracerProvider, exporter: InMemorySpanExporter
    ) -> None:
        gateway = _gateway(["The answer is 42."] * 2, provider)
        assert _post(gateway, adaptive(min_samples=2, max_samples=2), {}).status_code == 200
        request = one(finished(exporter), f"{names.SPAN_STEP} chat.completions")
        assert request.parent is None
        assert request.context is not None and format(request.context.trace_id, "032x") != TRACE_ID

    def test_a_request_that_is_not_adaptive_makes_no_span(
        self, provider: TracerProvider, exporter: InMemorySpanExporter
    ) -> None:
        gateway = _gateway(["hello"], provider)
        body = {"model": "scripted", "messages": [{"role": "user", "content": "hi"}]}
        assert _post(gateway, body, {"traceparent": TRACEPARENT}).status_code == 200
        assert finished(exporter) == []
