"""Where verdicts go: the decision log (durable) and LangGraph's custom stream (live).

A UI or CLI sees each verdict as it happens with ``graph.stream(..., stream_mode="custom")``: every event
is a plain dict whose ``type`` is :data:`VERDICT_EVENT` (or :data:`REPLY_EVENT` when a person answered an
``ask_user`` interrupt).
"""

from __future__ import annotations

from typing import Any

from langgraph.config import get_config, get_stream_writer

from retryctl.audit import DecisionLog
from retryctl.controller import Verdict

__all__ = ["REPLY_EVENT", "VERDICT_EVENT", "Emitter", "run_id_from_config"]

VERDICT_EVENT = "retryctl.verdict"
"""``type`` of the custom-stream event carrying one verdict."""
REPLY_EVENT = "retryctl.user_reply"
"""``type`` of the custom-stream event carrying a person's answer to ``ask_user``."""


def run_id_from_config() -> str:
    """The run's id: ``configurable.run_id`` if set, else the thread id, else ``"run"``."""
    try:
        configurable = get_config().get("configurable", {})
    except RuntimeError:  # called outside a runnable (a node invoked on its own)
        return "run"
    return str(configurable.get("run_id") or configurable.get("thread_id") or "run")


def _write(event: dict[str, Any]) -> None:
    try:
        writer = get_stream_writer()
    except (RuntimeError, KeyError):  # outside a graph there is no stream to write to
        return
    writer(event)


class Emitter:
    """Writes each verdict to the decision log (when there is one) and to the custom stream.

    The stream writer and the run id come from LangGraph's context; outside a graph (a tool node
    invoked on its own) the stream part is skipped and the run id is ``"run"``.
    """

    def __init__(self, log: DecisionLog | None = None) -> None:
        self.log = log

    def verdict(
        self,
        verdict: Verdict,
        *,
        step_id: str,
        attempt: int,
        target: str | None,
        candidates_summary: Any,
        latency_ms: float,
    ) -> dict[str, Any]:
        """Record and stream one verdict; return the streamed event."""
        run_id = run_id_from_config()
        event: dict[str, Any] = {
            "type": VERDICT_EVENT,
            "run_id": run_id,
            "step_id": step_id,
            "attempt": attempt,
            "target": target,
            "verdict": verdict.model_dump(mode="json"),
        }
        if self.log is not None:
            self.log.record_verdict(
                verdict,
                run_id=run_id,
                step_id=step_id,
                attempt=attempt,
                candidates_summary=candidates_summary,
                latency_ms=latency_ms,
                target=target,
            )
        _write(event)
        return event

    def reply(self, *, step_id: str, reply: dict[str, Any]) -> None:
        """Stream a person's answer to an ``ask_user`` interrupt."""
        _write({"type": REPLY_EVENT, "run_id": run_id_from_config(), "step_id": step_id, "reply": reply})
