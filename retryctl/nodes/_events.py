"""Where verdicts go: the decision log (durable) and LangGraph's custom stream (live).

A UI or CLI sees each verdict as it happens with ``graph.stream(..., stream_mode="custom")``: every event
is a plain dict whose ``type`` is :data:`VERDICT_EVENT` (or :data:`REPLY_EVENT` when a person answered an
``ask_user`` interrupt).

Every record names its run (:func:`run_id_from_config`), the id ``retryctl audit --why`` follows. It is
LangGraph's run id when there is one, else the thread, else an id drawn for the invocation; never a
constant, which would merge unrelated runs into one story.
"""

from __future__ import annotations

import os
import random
import threading
from collections import OrderedDict
from collections.abc import Mapping
from decimal import Decimal
from functools import partial
from typing import Any

from langchain_core.runnables.config import var_child_runnable_config
from langgraph.config import get_stream_writer

from retryctl.audit import DecisionLog
from retryctl.controller import Verdict
from retryctl.nodes._lc_runs import traced_config, verdict_run
from retryctl.nodes._tool_defer import DeferredLog
from retryctl.telemetry import NO_TRACING, Tracing

__all__ = ["REPLY_EVENT", "VERDICT_EVENT", "Emitter", "charged_between", "new_run_id", "run_id_from_config"]

VERDICT_EVENT = "retryctl.verdict"
"""``type`` of the custom-stream event carrying one verdict."""
REPLY_EVENT = "retryctl.user_reply"
"""``type`` of the custom-stream event carrying a person's answer to ``ask_user``."""

_RUNTIME_KEY = "__pregel_runtime"
"""Where LangGraph keeps a node's ``Runtime`` in ``configurable`` (what ``get_runtime()`` reads)."""
_INVOCATIONS: OrderedDict[int, tuple[object, str]] = OrderedDict()
_INVOCATIONS_KEPT = 1024
_INVOCATIONS_LOCK = threading.Lock()


_IDS = random.Random(os.urandom(32))
os.register_at_fork(after_in_child=lambda: _IDS.seed(os.urandom(32)))  # a forked child draws its own


_V4_CLEAR = ~((0xC000 << 48) | (0xF000 << 64))
_V4_SET = (0x8000 << 48) | (4 << 76)
"""The variant and version bits ``uuid.UUID(int=..., version=4)`` sets."""


def new_run_id() -> str:
    """A random (version 4) UUID as text. Drawn from a seeded generator, not ``uuid.uuid4()``: that
    reads the kernel's random source once per id, a system call on every logged run of one step
    (about a third of a record's cost in ``bench/controller_overhead.py``). A run id needs to be
    unique, not secret. The text is ``str(uuid.UUID(int=bits, version=4))``'s, made without the
    ``UUID`` object (its checks cost more than the id)."""
    h = "%032x" % (_IDS.getrandbits(128) & _V4_CLEAR | _V4_SET)
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


def run_id_from_config() -> str:
    """The run's id, the first of:

    1. ``configurable["run_id"]``: LangGraph Server sets it for each run, and ``retryctl demo`` and
       ``retryctl batch`` set it for theirs;
    2. the ``run_id`` given in the RunnableConfig of ``invoke``/``stream`` (``graph.invoke(x,
       {"run_id": ...})``), which LangGraph passes to the nodes of the invoked graph as
       ``get_runtime().execution_info.run_id`` (not to a subgraph's nodes: there the thread decides);
    3. ``configurable["thread_id"]``;
    4. an id drawn once per invocation (one ``invoke``/``stream`` call, subgraphs included).
    """
    # What langgraph.config.get_config() reads, without its check for Pythons before 3.11.
    config = var_child_runnable_config.get()
    if not config:  # called outside a runnable (a node's function called on its own)
        return new_run_id()
    configurable = config.get("configurable") or {}
    if configurable.get("run_id"):
        return str(configurable["run_id"])
    runtime = configurable.get(_RUNTIME_KEY)
    given = getattr(getattr(runtime, "execution_info", None), "run_id", None)
    if given:
        return str(given)
    if configurable.get("thread_id"):
        return str(configurable["thread_id"])
    # LangGraph makes one RunControl per root invoke/stream and hands it to every subgraph. (A caller
    # who passes one RunControl to several runs makes them one run here; a LangGraph without it
    # leaves a fresh id per record.)
    control = getattr(runtime, "control", None)
    if control is not None:
        return _invocation_id(control)
    return new_run_id()


def _invocation_id(control: object) -> str:
    # RunControl takes no attributes and no weak references: its id is drawn here, by identity. The
    # entry holds the object, so its id() cannot be reused by a later run while the entry lives; only
    # a run still going after the next 1024 have started would draw a second id.
    held = _INVOCATIONS.get(id(control))  # a hit needs no lock: an entry is written whole
    if held is not None and held[0] is control:
        return held[1]
    with _INVOCATIONS_LOCK:
        held = _INVOCATIONS.get(id(control))
        if held is not None and held[0] is control:
            return held[1]
        run_id = new_run_id()
        _INVOCATIONS[id(control)] = (control, run_id)
        while len(_INVOCATIONS) > _INVOCATIONS_KEPT:
            _INVOCATIONS.popitem(last=False)
        return run_id


def charged_between(before: Mapping[str, float], after: Mapping[str, float]) -> dict[str, float]:
    """What a ledger's totals grew by from ``before`` to ``after`` (its ``snapshot().used`` at an
    attempt's start and at its verdict): the attempt's charge, a verdict's ``budget_charged``, with the
    names that did not grow left out and wall time (not a charge) too. A difference of fractions is
    taken in decimal, as the ledger adds them: 0.00063 - 0.00035 is 0.00028, not the float difference
    0.00028000000000000003."""
    charged: dict[str, float] = {}
    for name, total in after.items():
        was = before.get(name, 0.0)
        if name == "wall_s" or total == was:
            continue
        exact = float(total).is_integer() and float(was).is_integer()
        charged[name] = total - was if exact else float(Decimal(repr(total)) - Decimal(repr(was)))
    return charged


def _write(event: dict[str, Any]) -> None:
    try:
        writer = get_stream_writer()
    except (RuntimeError, KeyError):  # outside a graph there is no stream to write to
        return
    writer(event)


class Emitter:
    """Writes each verdict to the decision log (when there is one), to the custom stream and to the
    trace (``tracing``: the attempt's span, with the record's hash; see :mod:`retryctl.telemetry`).

    The stream writer and the run id (:func:`run_id_from_config`) come from LangGraph's context;
    outside a graph (a tool node invoked on its own) the stream part is skipped, and so it is with
    ``stream=False`` (the tool node's default: its custom stream carries only what the tools write).
    """

    def __init__(
        self,
        log: DecisionLog | DeferredLog | None = None,
        *,
        stream: bool = True,
        tracing: Tracing = NO_TRACING,
    ) -> None:
        self.log = log
        self.stream = stream
        self.tracing = tracing

    def verdict(
        self,
        verdict: Verdict,
        *,
        step_id: str,
        attempt: int,
        target: str | None,
        candidates_summary: Any,
        latency_ms: float,
        extra: dict[str, Any] | None = None,
        call_made: bool = True,
    ) -> dict[str, Any]:
        """Record and stream one verdict; return the streamed event (``{}`` when nothing is
        streamed). ``extra`` goes into the record's ``extra`` and the event (e.g.
        ``{"decided_by": "user", "reply": ...}`` after an ``ask_user``). ``call_made``: ``False`` when
        the attempt called no model or tool (a refusal, a person's reply): its span says so."""
        traced = self.tracing.active
        lc_config = traced_config()
        if self.log is None and not self.stream and not traced and lc_config is None:
            return {}  # nowhere to write it: neither the run id nor the event is worth building
        run_id = run_id_from_config()
        digest: str | None = None
        if traced and isinstance(self.log, DeferredLog) and self.log.deferring():
            # A tool node's record waits for the end of its pass, and the attempt's span with it
            # (``held_ends``): the span is written now and takes the record's hash once it is written.
            span = self.tracing.verdict(
                verdict,
                attempt=attempt,
                target=target,
                step_id=step_id,
                run_id=run_id,
                latency_ms=latency_ms,
                call_made=call_made,
            )
            self.log.append_then(
                verdict,
                None if span is None else partial(self.tracing.record_hash, span),
                run_id=run_id,
                step_id=step_id,
                attempt=attempt,
                candidates_summary=candidates_summary,
                latency_ms=latency_ms,
                target=target,
                extra=extra,
            )
            traced = False
        elif self.log is not None:
            digest = self.log.append_verdict(
                verdict,
                run_id=run_id,
                step_id=step_id,
                attempt=attempt,
                candidates_summary=candidates_summary,
                latency_ms=latency_ms,
                target=target,
                extra=extra,
            )
        if lc_config is not None:  # LangChain's handlers (LangSmith, Langfuse, ...) see it as a run
            verdict_run(
                lc_config,
                verdict,
                step_id=step_id,
                attempt=attempt,
                target=target,
                record_hash=digest,
                run_id=run_id,
            )
        if traced:
            self.tracing.verdict(
                verdict,
                attempt=attempt,
                target=target,
                step_id=step_id,
                run_id=run_id,
                latency_ms=latency_ms,
                record_hash=digest,
                call_made=call_made,
            )
        if not self.stream:
            return {}  # the event (a second dump of the verdict) is built only for the stream
        event: dict[str, Any] = {
            "type": VERDICT_EVENT,
            "run_id": run_id,
            "step_id": step_id,
            "attempt": attempt,
            "target": target,
            "verdict": verdict.model_dump(mode="json"),
            **({"extra": extra} if extra else {}),
        }
        _write(event)
        return event

    def reply(self, *, step_id: str, reply: dict[str, Any]) -> None:
        """Stream a person's answer to an ``ask_user`` interrupt."""
        if self.stream:
            _write({"type": REPLY_EVENT, "run_id": run_id_from_config(), "step_id": step_id, "reply": reply})
