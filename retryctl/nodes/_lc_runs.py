"""Verdicts in LangChain's own runs: tags and metadata that LangSmith, Langfuse's LangChain
``CallbackHandler`` and any ``BaseCallbackHandler`` read with no retryctl-specific code.

Where each piece lands, and why there:

- **An attempt's run** (a model call of the ``create_agent`` middleware, a ``ControlledStep``
  attempt's LangChain model calls) is tagged ``retry:attempt:N`` and carries ``retryctl.attempt`` and
  ``retryctl.target`` in its metadata: :func:`attempt_scope` adds them to the runnable config of the
  context while the attempt runs, which LangChain passes to the runs started inside it (and their
  children). A tool attempt's run gets the same through a copy of its tool carrying them in its own
  ``tags``/``metadata`` (:func:`tagged_tool_request`): ``ToolNode`` hands each tool its node's config,
  which the context cannot change.
- **A verdict** is known only after its attempt ended, when that attempt's run is closed and its tags
  can no longer change. So each verdict is a small run of its own, ``retryctl.verdict`` (a chain run,
  a child of the node or tool call that decided), started and ended at once: tags
  ``retry:attempt:N`` and ``retryctl:action:<action>``, metadata with the confidence, reason, error
  class, attempt, target, step and the decision-log record's hash, under the names the OpenTelemetry
  spans use (:mod:`retryctl.telemetry.names`) (so a trace links to the audited
  log), and the verdict as its outputs. Any handler sees it in ``on_chain_start``/``on_chain_end``;
  LangSmith and Langfuse show it as a step of the trace with its tags and metadata, filterable by
  tag (``retryctl:action:switch``).
- **A feedback-style score** ``{"key": "retryctl.confidence", "score": c, "comment": reason}`` (no
  ``score`` when no check ran, and no ``retryctl.confidence`` in the metadata either): the
  callback API has no feedback event (LangSmith's feedback is a separate client call, made by who owns
  the API key, not by a library), so it travels twice: in the verdict run's outputs (``feedback``)
  and as a custom event :data:`VERDICT_EVENT` on the verdict run (``on_custom_event``, and
  ``astream_events``' ``on_custom_event``), whose data is the score plus the same metadata.

Cost: with no callback handler in the context (no tracer, no handler passed in the config) each
verdict and attempt reads one context variable and stops there (0.1-0.2 us a verdict, 0.6 us an
attempt's ``with``); with one no-op handler a verdict run costs about 60 us
(``bench/langchain_runs_overhead.py``).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext, suppress
from typing import Any

from langchain_core.callbacks import BaseCallbackManager, CallbackManager
from langchain_core.runnables import RunnableConfig
from langchain_core.runnables.config import var_child_runnable_config
from langgraph.prebuilt.tool_node import ToolCallRequest

from retryctl.controller import Verdict
from retryctl.telemetry import names as n

__all__ = [
    "FEEDBACK_KEY",
    "TARGET",
    "VERDICT_EVENT",
    "VERDICT_RUN",
    "action_tag",
    "attempt_scope",
    "attempt_tag",
    "tagged_tool_request",
    "traced_config",
    "verdict_metadata",
    "verdict_run",
]

VERDICT_RUN = "retryctl.verdict"
"""The name of the chain run that carries one verdict."""
VERDICT_EVENT = "retryctl.verdict"
"""The name of the custom event (``on_custom_event``) carrying the verdict's feedback-style score."""
TARGET = "retryctl.target"
"""The metadata key of the model or tool an attempt called (the span of the attempt is named for it)."""
FEEDBACK_KEY = n.CONFIDENCE
"""The ``key`` of the feedback-style score: the verdict's fused confidence."""


_NOTHING: AbstractContextManager[None] = nullcontext()
"""What :func:`attempt_scope` returns when nobody listens (reusable: it holds nothing)."""


def attempt_tag(attempt: int) -> str:
    """The tag of attempt ``attempt`` (``retry:attempt:2``), the form LangSmith users filter on."""
    return f"retry:attempt:{attempt}"


def action_tag(action: str) -> str:
    """The tag of a verdict's action (``retryctl:action:switch``)."""
    return f"retryctl:action:{action}"


def traced_config() -> RunnableConfig | None:
    """The runnable config of the context when it has a callback handler to tell; else ``None`` (no
    run would be seen by anyone: nothing is built)."""
    config = var_child_runnable_config.get()
    if not config:
        return None
    callbacks = config.get("callbacks")
    if not callbacks:
        return None
    if isinstance(callbacks, BaseCallbackManager) and not callbacks.handlers:
        return None
    return config


def attempt_scope(attempt: int, target: str | None) -> AbstractContextManager[None]:
    """Runs started inside (an attempt's model calls) carry ``retry:attempt:N`` and the attempt's
    metadata. With no handler listening, one shared no-op context manager (nothing is built).

    It may be entered in a generator across a ``yield`` (the middleware's model-call flow): the
    driver resumes the flow in the same context, so the reset finds its token; a flow dropped
    mid-attempt (an interrupt) and closed elsewhere leaves the value in the abandoned node's context.
    """
    config = traced_config()
    if config is None:
        return _NOTHING
    return _tagged(config, attempt, target)


@contextmanager
def _tagged(config: RunnableConfig, attempt: int, target: str | None) -> Iterator[None]:
    tags = [*(config.get("tags") or []), attempt_tag(attempt)]
    metadata = {**(config.get("metadata") or {}), n.ATTEMPT: attempt, TARGET: target}
    token = var_child_runnable_config.set({**config, "tags": tags, "metadata": metadata})
    try:
        yield
    finally:
        with suppress(ValueError):  # closed in another context (see above): nothing of ours there
            var_child_runnable_config.reset(token)


def tagged_tool_request(request: ToolCallRequest, attempt: int, target: str | None) -> ToolCallRequest:
    """``request`` with its tool tagged for attempt ``attempt`` (a copy of the tool with the tag and
    metadata added to its own ``tags``/``metadata``, which LangChain adds to the tool's run). A tool
    attempt needs this where a model attempt has :func:`attempt_scope`: ``ToolNode`` invokes the tool
    with its node's config, not the context's. ``request`` itself when no handler is listening."""
    tool = request.tool
    if tool is None or traced_config() is None:
        return request
    tagged = tool.model_copy(
        update={
            "tags": [*(tool.tags or []), attempt_tag(attempt)],
            "metadata": {**(tool.metadata or {}), n.ATTEMPT: attempt, TARGET: target},
        }
    )
    return request.override(tool=tagged)


def verdict_metadata(
    verdict: Verdict, *, step_id: str, attempt: int, target: str | None, record_hash: str | None, run_id: str
) -> dict[str, Any]:
    """What a verdict run's metadata says (flat, scalar values: what every tracer shows)."""
    meta: dict[str, Any] = {
        n.ACTION: verdict.action.value,
        n.ATTEMPT: attempt,
        TARGET: target,
        n.STEP_ID: step_id,
        n.RUN_ID: run_id,
        n.REASON: verdict.reason,
        n.CHECKED: verdict.checked,
    }
    if verdict.confidence is not None:
        # Left out when no check ran, as on the spans: an unchecked verdict claims no confidence.
        meta[n.CONFIDENCE] = verdict.confidence
    if verdict.evidence.error_class is not None:
        meta[n.ERROR_CLASS] = verdict.evidence.error_class
    if verdict.switch_to is not None:
        meta[n.SWITCH_TO] = verdict.switch_to
    if record_hash is not None:
        meta[n.RECORD_HASH] = record_hash
    return meta


def verdict_run(
    config: RunnableConfig,
    verdict: Verdict,
    *,
    step_id: str,
    attempt: int,
    target: str | None,
    record_hash: str | None,
    run_id: str,
) -> None:
    """Tell ``config``'s handlers about one verdict: a ``retryctl.verdict`` chain run (a child of the
    context's run) with its tags and metadata, and the feedback-style score as a custom event on it."""
    meta = verdict_metadata(
        verdict, step_id=step_id, attempt=attempt, target=target, record_hash=record_hash, run_id=run_id
    )
    manager = CallbackManager.configure(
        inheritable_callbacks=config.get("callbacks"),
        local_tags=[attempt_tag(attempt), action_tag(verdict.action.value)],
        inheritable_tags=config.get("tags"),
        local_metadata=meta,
        inheritable_metadata=config.get("metadata"),
    )
    feedback: dict[str, Any] = {"key": FEEDBACK_KEY, "comment": verdict.reason}
    if verdict.confidence is not None:
        feedback["score"] = verdict.confidence  # no score when nothing was checked (not a None score)
    run = manager.on_chain_start(
        None, {"step_id": step_id, "attempt": attempt, "target": target}, name=VERDICT_RUN
    )
    manager.on_custom_event(VERDICT_EVENT, {**feedback, "metadata": meta}, run_id=run.run_id)
    run.on_chain_end({"verdict": verdict.model_dump(mode="json"), "feedback": feedback})
