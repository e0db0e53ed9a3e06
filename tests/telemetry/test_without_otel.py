"""Without the ``otel`` extra everything works and no span is made; with it, the global provider is the
application's: retryctl uses it when set and never sets one. Each in a fresh interpreter (the import-time
decision is made once per process), the extra made uninstallable as tests/test_extras.py does it."""

from __future__ import annotations

from tests.test_extras import run_python

TOOL_CALL = """
from langchain_core.messages import AIMessage, ToolMessage
from langchain_core.tools import tool
from langgraph.graph import END, START, MessagesState, StateGraph
from retryctl.nodes import ControlledToolNode

@tool
def python(code: str) -> str:
    '''Run Python code.'''
    return "42"

def run(**kw):
    node = ControlledToolNode([python], sleep=lambda _: None, **kw)
    graph = StateGraph(MessagesState)
    graph.add_node("tools", node)
    graph.add_edge(START, "tools")
    graph.add_edge("tools", END)
    call = {"name": "python", "args": {"code": "print(42)"}, "id": "c"}
    out = graph.compile().invoke({"messages": [AIMessage(content="", tool_calls=[call])]})
    return [m.content for m in out["messages"] if isinstance(m, ToolMessage)]
"""


class TestWithoutTheExtra:
    def test_the_drivers_run_and_make_no_span(self) -> None:
        done = run_python(
            TOOL_CALL
            + """
import sys
import retryctl.middleware, retryctl.gateway._adaptive, retryctl.batch
from retryctl._extras import missing_module
from retryctl.telemetry import OTEL_AVAILABLE, Tracing, incoming_context
assert not OTEL_AVAILABLE
assert missing_module("otel") == "opentelemetry.trace"
# Tracing itself, handed a provider without the API installed, makes nothing.
tracing = Tracing(tracer_provider=object())
assert tracing.tracer() is None and not tracing.active
assert incoming_context({"traceparent": "00-" + "1" * 32 + "-" + "2" * 16 + "-01"}) is None
with tracing.step("s"), tracing.attempt("m", 1), tracing.span("x"):
    pass
print(run())
# A provider given to a driver without the API installed is refused where it is built (silently
# ignoring it would hide that nothing is traced).
from retryctl.exceptions import ConfigError
try:
    run(tracer_provider=object())
except ConfigError as exc:
    print(exc.field, "retryctl[otel]" in exc.problem)
print(sorted(m for m in sys.modules if m.startswith("opentelemetry")))
""",
            refused=("opentelemetry",),
        )
        assert done.returncode == 0, done.stderr
        assert done.stdout.splitlines() == ["['42']", "tracer_provider True", "[]"]


class TestTheGlobalProvider:
    def test_is_used_when_the_application_set_one_and_never_set_by_retryctl(self) -> None:
        done = run_python(
            TOOL_CALL
            + """
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

print(run())  # before the application set a provider: nothing is made, nothing is set
assert type(trace.get_tracer_provider()) is trace.ProxyTracerProvider
exporter = InMemorySpanExporter()
provider = TracerProvider()
provider.add_span_processor(SimpleSpanProcessor(exporter))
trace.set_tracer_provider(provider)
print(run())
spans = exporter.get_finished_spans()
print(sorted(s.name for s in spans))
print(sorted({s.instrumentation_scope.name for s in spans}))
"""
        )
        assert done.returncode == 0, done.stderr
        assert done.stdout.splitlines() == [
            "['42']",
            "['42']",
            "['python', 'retryctl.tool python']",
            "['retryctl']",
        ]
