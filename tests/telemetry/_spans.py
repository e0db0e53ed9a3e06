"""Reading finished spans back in the telemetry tests: by name, by parent, their events."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from retryctl.telemetry import names


def finished(exporter: InMemorySpanExporter) -> list[ReadableSpan]:
    """The spans finished so far, in the order they ended."""
    return list(exporter.get_finished_spans())


def named(spans: Sequence[ReadableSpan], name: str) -> list[ReadableSpan]:
    """The spans called ``name``, in the order they started."""
    return sorted((s for s in spans if s.name == name), key=lambda s: s.start_time or 0)


def one(spans: Sequence[ReadableSpan], name: str) -> ReadableSpan:
    (found,) = named(spans, name)
    return found


def children(spans: Sequence[ReadableSpan], parent: ReadableSpan) -> list[ReadableSpan]:
    """The direct children of ``parent``, in the order they started."""
    assert parent.context is not None
    own = parent.context.span_id
    return sorted(
        (s for s in spans if s.parent is not None and s.parent.span_id == own),
        key=lambda s: s.start_time or 0,
    )


def attrs(span: ReadableSpan) -> dict[str, Any]:
    return dict(span.attributes or {})


def evaluation(span: ReadableSpan) -> dict[str, Any]:
    """The attributes of the span's one ``gen_ai.evaluation.result`` event."""
    (event,) = [e for e in span.events if e.name == names.EVALUATION_EVENT]
    return dict(event.attributes or {})
