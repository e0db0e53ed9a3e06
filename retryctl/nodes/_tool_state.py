"""The shared vocabulary of a controlled tool call: its progress, validators, argument adapters."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from langchain_core.tools import BaseTool
from langgraph.types import Command

from retryctl.controller import ValidatorResult, Verdict

__all__ = ["ArgsAdapter", "CallState", "ResultValidator", "is_idempotent"]

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
    target: str
    """The tool currently tried."""
    group: list[str]
    """The requested tool's equivalence group in order (just the tool when it has none)."""
    refines: int = 0
    """Refine verdicts this tool already got in the current turn of the conversation."""
    tried: list[str] = field(default_factory=list)
    attempt: int = 0
    retries: int = 0
    switches: int = 0
    content: str | None = None
    """The latest successful result."""
    pending_ask: Verdict | None = None
    """An ``ask_user`` verdict recorded before an interrupt, to answer after a resume."""
    asks: int = 0
    """How many questions this call has put to the user: numbers them, so each gets its own reply."""
    asked: bool = False
    """The call resumed at a question it already put (``pending_ask``): not a new one."""
    command: Command[Any] | None = None
    """The latest result when the tool returned a ``Command`` instead of a message."""
    started: float | None = None
    """When the current attempt started, on the node's clock."""
    notes: list[str] = field(default_factory=list)
    """Facts for the next verdict's evidence (the breaker's store failing); emptied by each verdict."""

    @property
    def step_id(self) -> str:
        """The decision log's step id of this call."""
        return f"tool:{self.call['name']}:{self.call.get('id') or '-'}"
