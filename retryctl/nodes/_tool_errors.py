"""ToolNode's ``handle_tool_errors``, applied by the controller to the errors it has nothing to add to.

A controlled call needs the tool's exception itself (to classify it: retry, switch, refine), so the node
asks ToolNode's ``execute`` to raise every error, and applies ``handle_tool_errors`` here, once the
controller is done: an error that ends a call (a bug in the tool, a terminal error with no backup, an
invalid ``Command``, a missing store, bad arguments the model must fix) is raised, or becomes the error
``ToolMessage`` ToolNode would have made, exactly as ``handle_tool_errors`` says.

The two helpers of ToolNode's module that format the message and read a handler's annotation are
private functions of ``langgraph.prebuilt.tool_node`` (not of ``langgraph._internal``); they are reused
so that the caught types and the text are ToolNode's own (and the code object of its
``_inject_tool_args``, read, never overridden, to tell an injection error, which ToolNode never
handles, from the tool's own), and ``tests/nodes/test_tool_node_errors.py``
compares the outcomes with a plain ``ToolNode``'s for every kind of ``handle_tool_errors``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from langchain_core.messages import ToolCall, ToolMessage
from langgraph.prebuilt.tool_node import (  # ToolNode's own (private) helpers: see the module docstring
    ToolNode,
    _default_handle_tool_errors,
    _handle_tool_error,
    _infer_handled_types,
)

try:
    from langgraph.errors import is_invalid_resume
except ImportError:  # a langgraph before is_invalid_resume never marks resume errors (as ToolNode says)

    def is_invalid_resume(error: BaseException) -> bool:
        return False


__all__ = ["DEFAULT_HANDLE_TOOL_ERRORS", "ErrorHandling", "HandleToolErrors"]

HandleToolErrors = bool | str | Callable[..., str] | type[Exception] | tuple[type[Exception], ...]
"""What ``ToolNode(handle_tool_errors=...)`` accepts."""

DEFAULT_HANDLE_TOOL_ERRORS: Callable[[Exception], str] = _default_handle_tool_errors
"""ToolNode's default: invalid arguments from the model become an error message, anything else raises."""


_INJECTION = ToolNode._inject_tool_args.__code__
"""Where ToolNode injects state, store and runtime: an error raised there (a missing store, a state
without the field a tool needs) happens before ToolNode's error handling and is never handled by it."""


def _from_injection(exc: BaseException) -> bool:
    tb = exc.__traceback__
    while tb is not None:
        if tb.tb_frame.f_code is _INJECTION:
            return True
        tb = tb.tb_next
    return False


def _message(content: str, call: ToolCall | dict[str, Any]) -> ToolMessage:
    return ToolMessage(content=content, name=call["name"], tool_call_id=call["id"], status="error")


class ErrorHandling:
    """``handle_tool_errors`` as ToolNode applies it, at its two places."""

    def __init__(self, flag: HandleToolErrors) -> None:
        self.flag = flag

    def _handled_types(self) -> tuple[type[Exception], ...]:
        flag = self.flag
        if isinstance(flag, type) and issubclass(flag, Exception):
            return (flag,)
        if isinstance(flag, tuple):
            return flag
        if callable(flag) and not isinstance(flag, type):
            return _infer_handled_types(flag)
        return (Exception,)

    def tool_error(self, exc: BaseException, call: ToolCall | dict[str, Any]) -> ToolMessage | None:
        """The message for an error of the tool itself (ToolNode's ``execute``), or ``None``: raise it."""
        if not isinstance(exc, Exception) or is_invalid_resume(exc) or _from_injection(exc):
            return None
        if not self.flag or not isinstance(exc, self._handled_types()):
            return None
        return _message(_handle_tool_error(exc, flag=self.flag), call)

    def wrapper_error(self, exc: BaseException, call: ToolCall | dict[str, Any]) -> ToolMessage | None:
        """The message for an error raised by a ``wrap_tool_call`` (ToolNode catches any type there), or
        ``None``: raise it."""
        if not isinstance(exc, Exception) or not self.flag or is_invalid_resume(exc):
            return None
        return _message(_handle_tool_error(exc, flag=self.flag), call)
