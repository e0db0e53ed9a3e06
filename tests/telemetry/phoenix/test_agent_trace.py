"""End to end against a real trace backend: a ``create_agent`` run under ``RetryController`` (a tool
that is down, retried then switched; a run stopped by its budget) and a gateway request carrying a
``traceparent`` export their spans over OTLP/HTTP to Phoenix; the spans are read back through Phoenix's
REST API. The same agent run's LangChain callbacks carry the verdicts' tags and metadata."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("opentelemetry.exporter.otlp.proto.http", reason="the dev extra installs the exporter")

from retryctl.audit import read_records
from retryctl.telemetry import names
from tests._phoenix import Phoenix
from tests.nodes._lc_recorder import Recorder
from tests.telemetry.phoenix._scenario import APP_SPAN, PARENT_ID, TRACE_ID, Sent, by_id, provider_to, run_all


class Traced:
    """The scenario's spans as Phoenix stored them, and what the LangChain handler heard."""

    def __init__(self, spans: list[dict[str, Any]], sent: Sent, recorder: Recorder) -> None:
        self.spans = spans
        self.ids = by_id(spans)
        self.sent = sent
        self.recorder = recorder

    def named(self, name: str) -> list[dict[str, Any]]:
        return sorted((s for s in self.spans if s["name"] == name), key=lambda s: s["start_time"])

    def children(self, span: dict[str, Any]) -> list[dict[str, Any]]:
        own = span["context"]["span_id"]
        return sorted((s for s in self.spans if s["parent_id"] == own), key=lambda s: s["start_time"])

    def ancestors(self, span: dict[str, Any]) -> list[dict[str, Any]]:
        found = []
        while span["parent_id"] in self.ids:
            span = self.ids[span["parent_id"]]
            found.append(span)
        return found


def _evaluation(span: dict[str, Any]) -> dict[str, Any]:
    (event,) = [e for e in span["events"] if e["name"] == names.EVALUATION_EVENT]
    attributes: dict[str, Any] = event["attributes"]
    return attributes


def _hashes(path: Path) -> dict[tuple[str, int], str]:
    return {(r.step_id, r.attempt): r.hash for r in read_records(path) if r.kind == "verdict"}


@pytest.fixture(scope="module")
def traced(phoenix: Phoenix, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Traced]:
    project = f"retryctl-e2e-{uuid.uuid4().hex[:8]}"
    provider = provider_to(phoenix.traces_endpoint, project)
    recorder = Recorder()
    try:
        sent = run_all(provider, tmp_path_factory.mktemp("e2e"), [recorder])
    finally:
        provider.shutdown()
    logged = sum(1 for p in (sent.switched_log, sent.stopped_log, sent.gateway_log) for _ in read_records(p))
    # At least one span per logged verdict (its attempt) arrives; Phoenix inserts in batches.
    spans = phoenix.wait_for_spans(project, logged + 4)
    yield Traced(spans, sent, recorder)


class TestAgentTrace:
    def test_the_tool_call_is_a_span_with_its_attempts_as_children(self, traced: Traced) -> None:
        (tool,) = [
            s
            for s in traced.named(f"{names.SPAN_TOOL} multiply")
            if s["attributes"].get(names.ACTION) == "accept"
        ]
        attempts = traced.children(tool)
        assert [a["name"] for a in attempts] == ["multiply"] * 4 + ["multiply_backup"]
        labels = [_evaluation(a)[names.EVALUATION_SCORE_LABEL] for a in attempts]
        assert labels == ["retry", "retry", "retry", "switch", "accept"]
        assert [a["attributes"][names.ATTEMPT] for a in attempts] == [1, 2, 3, 4, 5]
        switch = attempts[3]
        assert switch["attributes"][names.ERROR_TYPE] == "transient"
        assert _evaluation(switch)[names.EVALUATION_NAME] == "retryctl.verdict"
        assert switch["attributes"][names.SWITCH_TO] == "multiply_backup"
        # Each attempt names the decision-log record it stands for.
        hashes = _hashes(traced.sent.switched_log)
        for attempt in attempts:
            key = (attempt["attributes"][names.STEP_ID], attempt["attributes"][names.ATTEMPT])
            assert attempt["attributes"][names.RECORD_HASH] == hashes[key]

    def test_every_retryctl_span_hangs_under_the_application_s_span(self, traced: Traced) -> None:
        roots = traced.named(APP_SPAN)
        assert len(roots) == 2 and all(r["parent_id"] is None for r in roots)
        root_ids = {r["context"]["span_id"] for r in roots}
        ours = [s for s in traced.spans if s["context"]["trace_id"] != TRACE_ID and s["name"] != APP_SPAN]
        assert ours
        for span in ours:
            lineage = traced.ancestors(span)
            assert lineage and lineage[-1]["context"]["span_id"] in root_ids, span["name"]
            assert span["context"]["trace_id"] == lineage[-1]["context"]["trace_id"]

    def test_the_budget_stop_is_a_verdict_event(self, traced: Traced) -> None:
        stopped_hashes = set(_hashes(traced.sent.stopped_log).values())
        stops = [
            s
            for s in traced.spans
            if s["attributes"].get(names.RECORD_HASH) in stopped_hashes
            and _evaluation(s)[names.EVALUATION_SCORE_LABEL] == "stop"
        ]
        assert stops
        assert any("budget 'attempts'" in _evaluation(s)[names.EVALUATION_EXPLANATION] for s in stops)

    def test_the_gateway_joins_the_incoming_trace(self, traced: Traced) -> None:
        (request,) = traced.named(f"{names.SPAN_STEP} chat.completions")
        assert request["context"]["trace_id"] == TRACE_ID
        assert request["parent_id"] == PARENT_ID  # the caller's span, which Phoenix never received
        assert request["attributes"][names.RUN_ID] == traced.sent.gateway_run_id
        attempts = traced.children(request)
        assert [a["name"] for a in attempts] == ["scripted", "scripted"]
        assert [_evaluation(a)[names.EVALUATION_SCORE_LABEL] for a in attempts] == ["retry", "accept"]
        accepted = _evaluation(attempts[1])
        assert 0.0 <= accepted[names.EVALUATION_SCORE_VALUE] <= 1.0

    def test_the_same_run_s_langchain_callbacks_carry_the_verdicts(self, traced: Traced) -> None:
        runs = traced.recorder.verdict_runs()
        by_hash = {r.meta["retryctl.record.hash"]: r for r in runs}
        spans_by_hash = {
            s["attributes"][names.RECORD_HASH]: s
            for s in traced.spans
            if names.RECORD_HASH in s["attributes"]
        }
        # Every verdict of the agent runs is both a LangChain run and an OTel attempt span, one record apart.
        agent_hashes = set(_hashes(traced.sent.switched_log).values()) | set(
            _hashes(traced.sent.stopped_log).values()
        )
        assert agent_hashes <= set(by_hash) and agent_hashes <= set(spans_by_hash)
        for digest in agent_hashes:
            run, span = by_hash[digest], spans_by_hash[digest]
            label = _evaluation(span)[names.EVALUATION_SCORE_LABEL]
            assert f"retryctl:action:{label}" in run.tags
            assert f"retry:attempt:{span['attributes'][names.ATTEMPT]}" in run.tags

    def test_phoenix_talked_only_to_this_machine(self, traced: Traced, phoenix: Phoenix) -> None:
        assert phoenix.remote_peers() <= {"127.0.0.1"}
