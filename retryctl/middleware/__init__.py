"""LangChain v1 ``create_agent`` middleware: :class:`RetryController` puts every model call and tool
call of an agent under the controller, with one budget per run and one decision log.

It is a driver of the attempt engine (:class:`~retryctl.controller.AttemptEngine`) like
:class:`~retryctl.nodes.ControlledStep` and :class:`~retryctl.nodes.ControlledToolNode`; nothing here
decides anything.
"""

from __future__ import annotations

from retryctl.middleware._middleware import MODEL_BREAKER, MODEL_POLICY, RetryController
from retryctl.middleware._runs import RUN_KEY, RetryControlState, Run

__all__ = ["MODEL_BREAKER", "MODEL_POLICY", "RUN_KEY", "RetryControlState", "RetryController", "Run"]
