"""Helpers for testing graphs that use retryctl, shipped for users (as ``structlog.testing`` is).

    from retryctl.testing import ScriptedBackend, capture_verdicts

    step = ControlledStep(ScriptedBackend(["41", "42", "42"]), policy=Policy(min_samples=3))
    run = capture_verdicts(step.compile(), {"messages": [("user", "6 * 7?")]})
    assert run.actions == ["accept"]

:func:`capture_verdicts` runs a graph (subgraphs included) and collects every verdict it emitted on the
custom stream, the final state and any pending interrupts; :func:`acapture_verdicts` is its async twin.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from typing import Any

from langgraph.pregel import Pregel
from langgraph.types import Interrupt, StreamMode

from retryctl.models import ScriptedBackend, ScriptedCall, ScriptItem
from retryctl.nodes._events import REPLY_EVENT, VERDICT_EVENT

__all__ = [
    "CapturedRun",
    "ScriptItem",
    "ScriptedBackend",
    "ScriptedCall",
    "acapture_verdicts",
    "capture_verdicts",
]


@dataclass
class CapturedRun:
    """What one run of a graph emitted."""

    verdicts: list[dict[str, Any]] = field(default_factory=list)
    """Every verdict event (``{"type": "retryctl.verdict", "run_id", "step_id", "attempt", "target",
    "verdict"}``, and ``"extra"`` for a verdict a person's reply decided)."""
    replies: list[dict[str, Any]] = field(default_factory=list)
    """Every answer a person gave to an ``ask_user`` interrupt during the run."""
    output: dict[str, Any] = field(default_factory=dict)
    """The graph's final state (its last ``values`` chunk)."""
    interrupts: list[Interrupt] = field(default_factory=list)
    """Interrupts the run stopped at (resume with ``Command(resume=...)``)."""

    @property
    def actions(self) -> list[str]:
        """The verdicts' actions in order, e.g. ``["retry", "switch", "accept"]``."""
        return [str(v["verdict"]["action"]) for v in self.verdicts]

    @property
    def interrupted(self) -> bool:
        """Whether the run is waiting for a person."""
        return bool(self.interrupts)

    def add(self, chunk: tuple[Any, ...]) -> None:
        """Take one ``(namespace, mode, data)`` chunk of a ``subgraphs=True`` stream."""
        namespace, mode, data = chunk
        if mode == "custom" and isinstance(data, dict):
            if data.get("type") == VERDICT_EVENT:
                self.verdicts.append(data)
            elif data.get("type") == REPLY_EVENT:
                self.replies.append(data)
        elif mode == "values" and not namespace and isinstance(data, dict):
            self.output = data
        elif mode == "updates" and not namespace and isinstance(data, dict):
            self.interrupts.extend(data.get("__interrupt__", ()))


_MODES: list[StreamMode] = ["custom", "values", "updates"]


def capture_verdicts(graph: Pregel[Any, Any, Any, Any], input: Any, config: Any = None) -> CapturedRun:
    """Run ``graph`` on ``input`` (a state or a ``Command(resume=...)``) and capture what it emitted."""
    run = CapturedRun()
    chunks: Iterator[Any] = graph.stream(input, config, stream_mode=_MODES, subgraphs=True)
    for chunk in chunks:
        run.add(chunk)
    return run


async def acapture_verdicts(graph: Pregel[Any, Any, Any, Any], input: Any, config: Any = None) -> CapturedRun:
    """Async twin of :func:`capture_verdicts`."""
    run = CapturedRun()
    chunks: AsyncIterator[Any] = graph.astream(input, config, stream_mode=_MODES, subgraphs=True)
    async for chunk in chunks:
        run.add(chunk)
    return run
