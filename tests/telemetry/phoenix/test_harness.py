"""The Phoenix harness itself: a span exported over OTLP/HTTP by the SDK comes back through the REST
API with its parent, attributes and events, and the server talks to nothing but 127.0.0.1."""

from __future__ import annotations

import pytest

from tests._phoenix import Phoenix

otel_sdk = pytest.importorskip("opentelemetry.sdk.trace", reason="opentelemetry-sdk is not installed")
otlp_http = pytest.importorskip(
    "opentelemetry.exporter.otlp.proto.http.trace_exporter",
    reason="opentelemetry-exporter-otlp-proto-http is not installed",
)


class TestPhoenixHarness:
    def test_a_span_goes_in_and_comes_back(self, phoenix: Phoenix) -> None:
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace.export import SimpleSpanProcessor

        provider = otel_sdk.TracerProvider(
            resource=Resource.create({"openinference.project.name": "harness"})
        )
        provider.add_span_processor(
            SimpleSpanProcessor(otlp_http.OTLPSpanExporter(endpoint=phoenix.traces_endpoint))
        )
        tracer = provider.get_tracer("tests.telemetry")
        with tracer.start_as_current_span("outer") as outer, tracer.start_as_current_span("inner") as inner:
            inner.set_attribute("retryctl.attempt", 2)
            inner.add_event("checked", {"score.value": 0.5})
        provider.shutdown()
        spans = {s["name"]: s for s in phoenix.wait_for_spans("harness", 2)}
        assert set(spans) == {"outer", "inner"}
        assert spans["inner"]["parent_id"] == format(outer.get_span_context().span_id, "016x")
        assert spans["inner"]["context"]["span_id"] == format(inner.get_span_context().span_id, "016x")
        assert spans["inner"]["attributes"]["retryctl.attempt"] == 2
        [event] = spans["inner"]["events"]
        assert (event["name"], event["attributes"]) == ("checked", {"score.value": 0.5})
        assert spans["outer"]["parent_id"] is None

    def test_the_server_talks_only_to_this_machine(self, phoenix: Phoenix) -> None:
        assert phoenix.started_in_s is not None
        assert phoenix.remote_peers() <= {"127.0.0.1"}
