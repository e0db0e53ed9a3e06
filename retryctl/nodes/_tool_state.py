"""The shared vocabulary of a controlled tool call: its progress, validators, argument adapters."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from langchain_core.messages import ToolMessage
from langchain_core.tools import BaseTool
from langgraph.types import Command

from retryctl.controller import AttemptState, Reservation, ValidatorResult, Verdict

__all__ = ["ArgsAdapter", "CallState", "ResultValidator", "ToolResult", "is_idempotent"]

ToolResult = ToolMessage | Command[Any] | list[ToolMessage | Command[Any]]
"""What ToolNode's ``execute`` returns for one call, and so what a controlled call returns."""

ResultValidator = Callable[[str, dict[str, Any]], "ValidatorResult | bool"]
"""A check of a tool's result: ``(content, args) -> ValidatorResult | bool``."""

ArgsAdapter = Callable[[dict[str, Any]], dict[str, Any]]
"""Turns the arguments the model wrote for one tool into arguments of an equivalent tool."""


def is_idempotent(tool: BaseTool) -> bool:
    """False when ``tool.metadata["idempotent"]`` is False: such a tool is never run twice for a call."""
    return bool((tool.metadata or {}).get("idempotent", True))


@dataclass
class CallState:
    """The progress of one tool call through its attempts."""

    call: dict[str, Any]
    """The model's tool call: ``name``, ``args``, ``id``."""
    journal_key: str | None
    """Where this call's journal records live (``None`` without a thread id: nothing can resume)."""
    flow: AttemptState
    """Where the call stands in the attempt engine: target, group, tried, attempt, retries, refines
    (those this tool already got in the current turn of the conversation count), switches, asks.
    Replaced, never changed, by each transition (see :class:`~retryctl.controller.AttemptEngine`)."""
    requested: BaseTool | None = None
    """The tool of the request (it may be one the caller's wrapper put in, unknown to the node)."""
    content: str | None = None
    """The latest successful result."""
    pending_ask: Verdict | None = None
    """An ``ask_user`` verdict recorded before an interrupt, to answer after a resume."""
    asked: bool = False
    """The call resumed at a question it already put (``pending_ask``): not a new one."""
    result: ToolResult | None = None
    """The latest successful result, as the tool returned it (a message, a ``Command``, a list)."""
    error: BaseException | None = None
    """The latest failure of the tool itself, unless transient (not a refusal by budget or breaker);
    ``None`` after a success. A call that ends on it ends as ToolNode would (``handle_tool_errors``)."""
    started: float | None = None
    """When the current attempt started, on the node's clock."""
    notes: list[str] = field(default_factory=list)
    """Facts for the next verdict's evidence (the breaker's store failing); emptied by each verdict."""
    held: Reservation | None = None
    """The current attempt's reservation on the ledger, until its verdict (committed: the attempt was
    charged to the ledger)."""

    @property
    def target(self) -> str:
        """The tool currently tried."""
        return self.flow.target

    @property
    def attempt(self) -> int:
        return self.flow.attempt

    @property
    def switches(self) -> int:
        return self.flow.switches

    @property
    def asks(self) -> int:
        """How many questions this call has put to the user: numbers them, so each gets its own reply."""
        return self.flow.asks

    @property
    def step_id(self) -> str:
        """The decision log's step id of this call."""
        return f"tool:{self.call['name']}:{self.call.get('id') or '-'}"
