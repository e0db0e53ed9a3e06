"""A scripted tool-calling chat model for unit tests of the middleware's decisions.

Each call takes the next item of its script: an ``AIMessage`` is the answer (tool calls included), an
exception is raised. ``bind_tools`` records the tools and returns the model, as real providers do.
Every call's messages are kept in ``seen`` so a test can assert what the model was told.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.runnables import Runnable
from pydantic import ConfigDict, PrivateAttr


class ScriptedChat(BaseChatModel):
    """Answers from ``script`` in order; raises when the script is used up (a test bug)."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    script: list[Any]
    model_name: str = "scripted"
    _lock: threading.Lock = PrivateAttr(default_factory=threading.Lock)
    _seen: list[list[BaseMessage]] = PrivateAttr(default_factory=list)
    _bound: list[list[str]] = PrivateAttr(default_factory=list)

    @property
    def _llm_type(self) -> str:
        return "scripted-chat"

    @property
    def seen(self) -> list[list[BaseMessage]]:
        """The messages of every call so far, in order."""
        return self._seen

    @property
    def bound(self) -> list[list[str]]:
        """The tool names of every ``bind_tools`` so far."""
        return self._bound

    def bind_tools(  # type: ignore[override]  # accepts whatever create_agent binds
        self, tools: Sequence[Any], **kwargs: Any
    ) -> Runnable[Any, BaseMessage]:
        self._bound.append([getattr(t, "name", None) or t.get("name", "?") for t in tools])
        return self

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        with self._lock:
            self._seen.append(list(messages))
            if not self.script:
                raise AssertionError(f"{self.model_name}: script used up after {len(self._seen) - 1} calls")
            item = self.script.pop(0)
        if isinstance(item, BaseException):
            raise item
        assert isinstance(item, AIMessage)
        return ChatResult(generations=[ChatGeneration(message=item.model_copy())])


def call(name: str, args: dict[str, Any], id: str = "c1", *, tokens: tuple[int, int] = (10, 5)) -> AIMessage:
    """An answer calling tool ``name`` with ``args`` (and usage metadata of ``tokens`` in/out)."""
    return AIMessage(
        content="",
        tool_calls=[{"name": name, "args": args, "id": id, "type": "tool_call"}],
        usage_metadata={"input_tokens": tokens[0], "output_tokens": tokens[1], "total_tokens": sum(tokens)},
    )


def say(text: str, *, tokens: tuple[int, int] = (10, 5)) -> AIMessage:
    """A final answer."""
    return AIMessage(
        content=text,
        usage_metadata={"input_tokens": tokens[0], "output_tokens": tokens[1], "total_tokens": sum(tokens)},
    )
