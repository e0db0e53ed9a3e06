"""LangGraph wiring: the controlled step graph, the ``ToolNode`` drop-in, ``ask_user`` interrupts.

Nothing here decides anything: nodes gather what happened into an
:class:`~retryctl.controller.Observation`, call :func:`~retryctl.controller.decide`, and turn the verdict
into LangGraph control flow (``Command(goto=...)``, ``interrupt()``). Every verdict is written to the
decision log, when one is given, and emitted on the custom stream (``stream_mode="custom"``).
"""

from __future__ import annotations

from retryctl.nodes._backoff import (
    WaitRetryAfter,
)
from retryctl.nodes._events import REPLY_EVENT, VERDICT_EVENT, Emitter
from retryctl.nodes._interrupt import ASK_EVENT, UserReply, parse_reply
from retryctl.nodes._journal import MemoryToolJournal, SQLiteToolJournal, ToolJournal
from retryctl.nodes._persist import sqlite_checkpointer
from retryctl.nodes._sampling import SamplingSchedule
from retryctl.nodes._state import (
    CandidateRecord,
    ControlState,
    StepInput,
    StepOutput,
    StepResult,
    StepState,
    StepVerdict,
)
from retryctl.nodes._step import ControlledStep
from retryctl.nodes._tool_calls import TOOL_POLICY, ControlledToolCalls
from retryctl.nodes._tool_node import ControlledToolNode
from retryctl.nodes._tool_outcome import verdict_of
from retryctl.nodes._tool_state import (
    ArgsAdapter,
    ResultValidator,
    ToolResult,
)

__all__ = [
    "ASK_EVENT",
    "REPLY_EVENT",
    "TOOL_POLICY",
    "VERDICT_EVENT",
    "ArgsAdapter",
    "CandidateRecord",
    "ControlState",
    "ControlledStep",
    "ControlledToolCalls",
    "ControlledToolNode",
    "Emitter",
    "MemoryToolJournal",
    "ResultValidator",
    "SQLiteToolJournal",
    "SamplingSchedule",
    "StepInput",
    "StepOutput",
    "StepResult",
    "StepState",
    "StepVerdict",
    "ToolJournal",
    "ToolResult",
    "UserReply",
    "WaitRetryAfter",
    "parse_reply",
    "sqlite_checkpointer",
    "verdict_of",
]
