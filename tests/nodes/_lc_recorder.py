"""A real LangChain callback handler that records what it is told: the runs started (with their tags,
metadata, parent) and the custom events. What LangSmith's or Langfuse's handler would be given."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any
from uuid import UUID

from langchain_core.callbacks import BaseCallbackHandler

from retryctl.nodes._lc_runs import VERDICT_RUN


@dataclass
class Started:
    """One run as its ``on_*_start`` saw it, and its outputs once ended."""

    kind: str
    name: str | None
    run_id: UUID
    parent: UUID | None
    tags: list[str]
    meta: dict[str, Any]
    outputs: dict[str, Any] | None = None


@dataclass
class Event:
    """One custom event."""

    name: str
    data: Any
    run_id: UUID
    tags: list[str] = field(default_factory=list)


class Recorder(BaseCallbackHandler):
    """Records every run start and custom event (thread-safe: tool calls run in threads)."""

    def __init__(self) -> None:
        self.starts: list[Started] = []
        self.events: list[Event] = []
        self._lock = threading.Lock()

    def _start(self, kind: str, run_id: UUID, parent: UUID | None, kw: dict[str, Any]) -> None:
        name = kw.get("name")
        started = Started(
            kind, name, run_id, parent, list(kw.get("tags") or []), dict(kw.get("metadata") or {})
        )
        with self._lock:
            self.starts.append(started)

    def on_chain_start(
        self, serialized: Any, inputs: Any, *, run_id: UUID, parent_run_id: UUID | None = None, **kw: Any
    ) -> None:
        self._start("chain", run_id, parent_run_id, kw)

    def on_chain_end(self, outputs: Any, *, run_id: UUID, **kw: Any) -> None:
        with self._lock:
            for s in self.starts:
                if s.run_id == run_id and isinstance(outputs, dict):
                    s.outputs = outputs

    def on_chat_model_start(
        self, serialized: Any, messages: Any, *, run_id: UUID, parent_run_id: UUID | None = None, **kw: Any
    ) -> None:
        self._start("chat_model", run_id, parent_run_id, kw)

    def on_tool_start(
        self, serialized: Any, input_str: str, *, run_id: UUID, parent_run_id: UUID | None = None, **kw: Any
    ) -> None:
        self._start("tool", run_id, parent_run_id, kw)

    def on_custom_event(
        self,
        name: str,
        data: Any,
        *,
        run_id: UUID,
        tags: list[str] | None = None,
        metadata: dict[str, Any] | None = None,
        **kw: Any,
    ) -> None:
        with self._lock:
            self.events.append(Event(name, data, run_id, list(tags or [])))

    def verdict_runs(self) -> list[Started]:
        """The ``retryctl.verdict`` runs, in the order they started."""
        return [s for s in self.starts if s.name == VERDICT_RUN]

    def starts_of(self, kind: str) -> list[Started]:
        """The runs of one kind (``chat_model``, ``tool``, ``chain``)."""
        return [s for s in self.starts if s.kind == kind]

    def events_named(self, name: str) -> list[Event]:
        """The custom events of that name, in order."""
        return [e for e in self.events if e.name == name]
