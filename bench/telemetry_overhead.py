"""What OpenTelemetry costs per decision: without the ``otel`` extra, with the API and no provider set,
and with the SDK exporting through a ``BatchSpanProcessor``.

    .venv/bin/python bench/telemetry_overhead.py [--calls 2000] [--steps 300] [--rounds 7] [--quick] [--json]
        [--baseline CHECKOUT]

Two views, each over the same three subjects, in rounds that rotate them (``bench/_overhead.py``, the
harness of ``controller_overhead.py``), best round median kept:

- **decision**: one controlled tool call, ``ControlledToolCalls.wrap`` on an ``execute`` that returns at
  once, with a real ``DecisionLog``: one verdict each, nothing else timed (the call's tool span, its
  attempt span, the verdict's attributes and event when traced);
- **graph step**: ``controller_overhead.py``'s graph (``START -> ControlledToolNode -> END`` over a no-op
  tool), one ``graph.invoke`` per decision: what an agent step pays, LangGraph included.

Subjects: ``off``: the ``otel`` extra not installed (the import-time decision of
``retryctl.telemetry._api`` taken as it is without it: ``trace`` is ``None``); ``api``: the API
installed and no provider set (the application did not configure tracing: the target is within 0.02 ms
of ``off`` per decision); ``sdk``: a ``TracerProvider`` given as ``tracer_provider=``, its spans batched
by a ``BatchSpanProcessor`` to an exporter that drops them (the cost in the application's threads; the
export runs in the processor's own thread). ``sdk`` needs ``opentelemetry-sdk`` (the dev extra).

``--baseline CHECKOUT`` also times the decision view in another checkout of retryctl (one from before
``retryctl.telemetry``) and in this one, built alike with no ``tracer_provider``, in alternating processes:
today's cost beside this branch's with the API installed and nothing configured.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from _overhead import rotated_rounds  # bench/ is the script's directory
from controller_overhead import build, noop, step_input
from langchain_core.messages import ToolMessage
from langgraph.prebuilt.tool_node import ToolCallRequest

from retryctl.audit import DecisionLog
from retryctl.nodes import ControlledToolCalls, ControlledToolNode

API_TARGET_MS = 0.02
"""The API with no provider set may cost at most this much per decision more than ``off``."""


EXPORTED = [0]
"""Spans the ``sdk`` subject's exporter was handed (a check that the subject traced at all)."""


def _sdk_provider() -> Any:
    """A provider batching to an exporter that counts and drops every span (``None`` without the SDK)."""
    try:
        from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult
    except ImportError:
        return None

    class Dropped(SpanExporter):
        def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
            EXPORTED[0] += len(spans)
            return SpanExportResult.SUCCESS

    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(Dropped()))
    return provider


@contextmanager
def _without_otel(off: bool) -> Iterator[None]:
    """As if ``opentelemetry`` were not installed: the one variable the import-time decision sets."""
    if not off:
        yield
        return
    from retryctl.telemetry import _api  # here: --plain runs in checkouts from before it existed

    held = _api.trace
    _api.trace = None
    try:
        yield
    finally:
        _api.trace = held


def _requests(start: int, n: int) -> list[ToolCallRequest]:
    return [
        ToolCallRequest(
            tool_call={"name": "noop", "args": {}, "id": f"call-{start + i}", "type": "tool_call"},
            tool=noop,
            state={"messages": []},
            runtime=None,  # type: ignore[arg-type]
        )
        for i in range(n)
    ]


def _execute(request: ToolCallRequest) -> ToolMessage:
    return ToolMessage("ok", name="noop", tool_call_id=str(request.tool_call["id"]))


def decision_median(calls: ControlledToolCalls, n: int, start: int, *, off: bool) -> float:
    """Median seconds per controlled call (one verdict each) over ``n`` calls."""
    requests = _requests(start, n)
    times = []
    with _without_otel(off):
        for request in requests:
            began = time.perf_counter()
            calls.wrap(request, _execute)
            times.append(time.perf_counter() - began)
    return statistics.median(times)


def step_median(graph: Any, n: int, start: int, *, off: bool) -> float:
    """Median seconds per ``graph.invoke`` (one verdict each) over ``n`` steps."""
    inputs = [step_input(start + i) for i in range(n)]
    times = []
    with _without_otel(off):
        for payload in inputs:
            began = time.perf_counter()
            graph.invoke(payload)
            times.append(time.perf_counter() - began)
    return statistics.median(times)


def measure(calls_n: int, steps: int, rounds: int, tmp: Path) -> dict[str, Any]:
    provider = _sdk_provider()
    subjects = ["off", "api"] + (["sdk"] if provider is not None else [])
    logs = {name: DecisionLog(tmp / f"{name}.jsonl") for name in subjects}
    given = {name: (provider if name == "sdk" else None) for name in subjects}
    calls = {n: ControlledToolCalls([noop], log=logs[n], tracer_provider=given[n]) for n in subjects}
    graphs = {n: build(ControlledToolNode([noop], log=logs[n], tracer_provider=given[n])) for n in subjects}
    ids = itertools.count(1_000_000, max(calls_n, steps))  # every call of every round has its own id

    def decision(name: str) -> Callable[[], float]:
        return lambda: decision_median(calls[name], calls_n, next(ids), off=name == "off")

    def step(name: str) -> Callable[[], float]:
        return lambda: step_median(graphs[name], steps, next(ids), off=name == "off")

    for name in subjects:  # warm-up: imports, schema caches, the logs' first writes
        decision(name)()
        if steps:
            step(name)()
    views = {
        "decision": rotated_rounds({n: decision(n) for n in subjects}, rounds),
        "graph_step": rotated_rounds({n: step(n) for n in subjects}, rounds) if steps else {},
    }
    if provider is not None:
        provider.shutdown()
    for log in logs.values():
        log.close()
    out: dict[str, Any] = {
        "rounds": rounds,
        "calls": calls_n,
        "steps": steps,
        "load_1m": os.getloadavg()[0],
        "sdk_spans_exported": EXPORTED[0],
    }
    for view, runs in views.items():
        if not runs:
            continue
        best = {n: min(r) * 1000.0 for n, r in runs.items()}
        out[view] = {
            "ms": best,
            "rounds_ms": {n: [x * 1000.0 for x in r] for n, r in runs.items()},
            "over_off_ms": {n: best[n] - best["off"] for n in subjects if n != "off"},
        }
    out["api_target_met"] = out["decision"]["over_off_ms"]["api"] <= API_TARGET_MS
    return out


def plain_rounds(calls_n: int, rounds: int, tmp: Path) -> list[float]:
    """The decision view's figure per round for a ``ControlledToolCalls`` built as before telemetry
    existed (no ``tracer_provider``): what ``--baseline`` runs in the older checkout and in this one."""
    log = DecisionLog(tmp / "plain.jsonl")
    calls = ControlledToolCalls([noop], log=log)
    ids = itertools.count(1_000_000, calls_n)
    decision_median(calls, calls_n, next(ids), off=False)  # warm-up
    figures = [decision_median(calls, calls_n, next(ids), off=False) * 1000.0 for _ in range(rounds)]
    log.close()
    return figures


def baseline(checkout: str, calls_n: int, rounds: int) -> dict[str, list[float]]:
    """``plain_rounds`` in the retryctl of ``checkout`` (e.g. the main branch's worktree) and in this one,
    alternating processes: today's cost per decision beside this branch's with nothing configured."""
    here = str(Path(__file__).resolve().parents[1])
    runs: dict[str, list[float]] = {"baseline": [], "this": []}
    for _ in range(3):
        for name, root in (("baseline", checkout), ("this", here)):
            env = {**os.environ, "PYTHONPATH": os.pathsep.join([root, os.environ.get("PYTHONPATH", "")])}
            out = subprocess.run(
                [sys.executable, __file__, "--plain", "--calls", str(calls_n), "--rounds", str(rounds)],
                env=env,
                capture_output=True,
                text=True,
                check=True,
                cwd=Path(__file__).parent,
            )
            runs[name].extend(json.loads(out.stdout.splitlines()[-1]))
    return runs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", metavar="CHECKOUT", help="also time the decision in another checkout")
    parser.add_argument("--plain", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--calls", type=int, default=2000, help="controlled calls per round (decision view)")
    parser.add_argument("--steps", type=int, default=300, help="graph steps per round (0: skip that view)")
    parser.add_argument("--rounds", type=int, default=7, help="rounds per subject (best median is kept)")
    parser.add_argument("--quick", action="store_true", help="a few calls: check that it runs")
    parser.add_argument("--json", action="store_true", help="print one JSON object on the last line")
    args = parser.parse_args()
    calls_n, steps, rounds = (50, 20, 2) if args.quick else (args.calls, args.steps, args.rounds)
    if args.plain:
        with tempfile.TemporaryDirectory() as tmp:
            print(json.dumps(plain_rounds(calls_n, rounds, Path(tmp))))
        return
    with tempfile.TemporaryDirectory() as tmp:
        res = measure(calls_n, steps, rounds, Path(tmp))
    if args.baseline:
        runs = baseline(args.baseline, calls_n, rounds)
        res["baseline_ms"] = {name: min(r) for name, r in runs.items()}
    print(f"load average: {res['load_1m']:.2f}; {rounds} rounds; best round median per decision")
    labels = {
        "off": "otel not installed",
        "api": "API, no provider set",
        "sdk": "SDK, BatchSpanProcessor",
    }
    for view, title in (("decision", "one controlled tool call"), ("graph_step", "one graph step")):
        if view not in res:
            continue
        print(f"{title}:")
        for name, ms in res[view]["ms"].items():
            extra = "" if name == "off" else f"  (+{res[view]['over_off_ms'][name]:.4f} ms over off)"
            print(f"  {labels[name]:<26} {ms:.4f} ms{extra}")
    api = res["decision"]["over_off_ms"]["api"]
    print(
        f"API with no provider over off: {api:.4f} ms per decision (target <= {API_TARGET_MS} ms: "
        f"{'met' if res['api_target_met'] else 'NOT met'})"
    )
    if "baseline_ms" in res:
        base, this = res["baseline_ms"]["baseline"], res["baseline_ms"]["this"]
        print(
            f"before telemetry ({args.baseline}): {base:.4f} ms per decision; this checkout, no provider: "
            f"{this:.4f} ms ({this - base:+.4f} ms; alternating processes, best round)"
        )
    if "sdk" in res["decision"]["ms"]:
        print(f"SDK spans exported (and dropped): {res['sdk_spans_exported']}")
    else:
        print("SDK view skipped: opentelemetry-sdk is not installed (pip install 'retryctl[dev]')")
    if args.json:
        print(json.dumps(res))


if __name__ == "__main__":
    main()
