"""The run the Phoenix tests and ``bench/phoenix_screenshot.py`` send: a ``create_agent`` agent under
``RetryController`` whose tool is down (retried, then switched to its backup), a second run stopped by
its budget, and an adaptive request to the gateway that continues the caller's trace.

Everything goes through one SDK ``TracerProvider`` that exports over OTLP/HTTP to a Phoenix project,
passed to each driver (``tracer_provider=``): the global provider is never set.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.tools import BaseTool, tool
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

from retryctl.audit import DecisionLog
from retryctl.controller import Budget
from retryctl.gateway import EmbeddedUpstream, Gateway, create_app
from retryctl.middleware import RetryController
from retryctl.models import ScriptedBackend, TransientBackendError
from tests.gateway._support import adaptive, config
from tests.middleware._scripted import ScriptedChat, call, say
from tests.middleware._support import Agent, ano_wait, multiply, multiply_backup, no_wait

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
"""The trace id of the caller whose ``traceparent`` the gateway request carries."""
PARENT_ID = "00f067aa0ba902b7"
"""The caller's span id in that ``traceparent``."""
TRACEPARENT = f"00-{TRACE_ID}-{PARENT_ID}-01"
APP_SPAN = "agent run"
"""The application's own span around each agent run (retryctl's spans are its descendants)."""


def provider_to(endpoint: str, project: str) -> TracerProvider:
    """An SDK provider exporting in batches over OTLP/HTTP to ``endpoint``, into Phoenix's ``project``."""
    provider = TracerProvider(
        resource=Resource.create({"service.name": "retryctl-e2e", "openinference.project.name": project})
    )
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=endpoint)))
    return provider


def down_multiply() -> BaseTool:
    """A ``multiply`` whose server is down: every call a transient fault."""

    @tool
    def multiply(a: float, b: float) -> float:
        """Multiply two numbers."""
        raise ConnectionError("connection reset by peer")

    return multiply


@dataclass
class Sent:
    """What the scenario ran, for the checks."""

    switched_log: Path
    stopped_log: Path
    gateway_log: Path
    gateway_run_id: str


def _agent(
    model: ScriptedChat,
    tools: list[BaseTool],
    controller: RetryController,
    callbacks: list[BaseCallbackHandler],
    thread: str,
) -> Agent:
    agent = Agent(model, tools, controller, "sync")
    agent.config = {"configurable": {"thread_id": thread}, "callbacks": list(callbacks)}
    return agent


def run_agents(
    provider: TracerProvider, out: Path, callbacks: list[BaseCallbackHandler]
) -> tuple[Path, Path]:
    """The two ``create_agent`` runs (switched; stopped by the budget), each inside an application span."""
    app = provider.get_tracer("tests.telemetry.phoenix")
    down = down_multiply()
    switched_log, stopped_log = out / "switched.jsonl", out / "stopped.jsonl"
    switched = RetryController(
        log=switched_log,
        groups={"arithmetic": [down, multiply_backup]},
        sleep=no_wait,
        asleep=ano_wait,
        tracer_provider=provider,
    )
    model = ScriptedChat(script=[call("multiply", {"a": 6, "b": 7}), say("6 times 7 is 42.")])
    with app.start_as_current_span(APP_SPAN, attributes={"app.question": "6 times 7?"}):
        _agent(model, [down], switched, callbacks, "switched").ask("6 times 7?")
    stopped = RetryController(log=stopped_log, budget=Budget(attempts=1), tracer_provider=provider)
    model = ScriptedChat(script=[call("multiply", {"a": 6, "b": 7})])
    with app.start_as_current_span(APP_SPAN, attributes={"app.question": "6 times 7, on one attempt?"}):
        _agent(model, [multiply], stopped, callbacks, "stopped").ask("6 times 7, on one attempt?")
    return switched_log, stopped_log


def run_gateway(provider: TracerProvider, out: Path) -> tuple[Path, str]:
    """One adaptive request with a ``traceparent``: a transient fault, then two agreeing samples."""
    log_path = out / "gateway.jsonl"
    fault = TransientBackendError("HTTP 503: busy", backend="scripted", status_code=503)
    backend = ScriptedBackend([fault, "The answer is 42.", "The answer is 42."], confidence=0.95)
    gateway = Gateway(
        config(),
        upstream=EmbeddedUpstream(backend, name="scripted"),
        log=DecisionLog(log_path),
        tracer_provider=provider,
    )

    async def go() -> httpx.Response:
        transport = httpx.ASGITransport(app=create_app(gateway.config, gateway=gateway))
        try:
            async with httpx.AsyncClient(transport=transport, base_url="http://gateway") as client:
                body = adaptive(min_samples=2, max_samples=2)
                return await client.post(
                    "/v1/chat/completions", json=body, headers={"traceparent": TRACEPARENT}
                )
        finally:
            await gateway.aclose()

    response = asyncio.run(go())
    assert response.status_code == 200, response.text
    return log_path, response.headers["x-retryctl-run-id"]


def run_all(provider: TracerProvider, out: Path, callbacks: list[BaseCallbackHandler]) -> Sent:
    """The whole scenario; every span is exported when it returns (the provider is flushed)."""
    switched, stopped = run_agents(provider, out, callbacks)
    gateway_log, run_id = run_gateway(provider, out)
    provider.force_flush()
    return Sent(switched, stopped, gateway_log, run_id)


def by_id(spans: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Phoenix's spans by their span id."""
    return {s["context"]["span_id"]: s for s in spans}
