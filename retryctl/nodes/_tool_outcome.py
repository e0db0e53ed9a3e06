"""What a tool call ends with, for each verdict, journaled so a resumed node returns it again instead of
redoing the call.

- ``accept``: the result as the tool returned it (a message with its content blocks and artifact, a
  ``Command``, a list of them). When the controller did something on the way (a retry, a switch, a
  person's answer), a ``ToolMessage`` result says so in ``response_metadata["retryctl"]``, where it
  overwrites nothing; a first-try result is left exactly as ToolNode would return it.
- a call that ends on an error of the tool itself (bad arguments, a bug, a terminal error or a
  transient one with no retry or backup left): ToolNode's outcome, as ``handle_tool_errors`` says
  (raised, or ToolNode's error message); an error message the tool made itself goes back as it came.
- ``refine`` on a failed validator, ``stop`` on a spent budget or an open breaker, ``ask_user``:
  retryctl's own error ``ToolMessage``, saying why, with the verdict in ``response_metadata["retryctl"]``.
"""

from __future__ import annotations

from typing import Any

from langchain_core.messages import ToolMessage
from langgraph.types import Command

from retryctl.controller import (
    Act,
    Action,
    Ask,
    AttemptEngine,
    Extend,
    Finish,
    FinishStatus,
    Ledger,
    Sleep,
    StepLedger,
    Usage,
    Verdict,
)
from retryctl.nodes._events import Emitter
from retryctl.nodes._interrupt import ask_payload, reply_extra
from retryctl.nodes._journal import ToolJournal, dump_result
from retryctl.nodes._tool_ask import reply_to, waiting
from retryctl.nodes._tool_defer import put_later
from retryctl.nodes._tool_errors import ErrorHandling
from retryctl.nodes._tool_state import CallState, ToolResult

__all__ = ["ToolOutcomes", "verdict_of"]

METADATA_KEY = "retryctl"
"""The key of retryctl's record in a ``ToolMessage``'s ``response_metadata``."""


def verdict_of(message: ToolMessage) -> dict[str, Any] | None:
    """retryctl's record of how a tool call ended (``action``, ``reason``, ``confidence``,
    ``served_by``, ``attempts``, ``status``, ``verdict``), or ``None`` for a message the controller
    left as the tool returned it on its first try (an accept by the tool the model called)."""
    info = (message.response_metadata or {}).get(METADATA_KEY)
    return info if isinstance(info, dict) else None


_STATUS = {Action.ACCEPT: "accepted", Action.STOP: "stopped"}
"""A call's status by the verdict it ended on (any other ending is a refine)."""


class ToolOutcomes:
    """Acting on a tool call's verdict (a mixin of :class:`ToolCallController`, which owns the settings).

    :meth:`after` hands each verdict to the attempt engine, which moves the call on (switch target,
    retry counter, extended budget); here only the result a call ends with is made."""

    journal: ToolJournal
    emitter: Emitter
    engine: AttemptEngine
    errors: ErrorHandling
    ledger: Ledger | StepLedger | None
    messages_key: str
    result_key: str | None

    def after(self, st: CallState, verdict: Verdict) -> ToolResult | Act | Sleep:
        """What follows ``verdict``, as the attempt engine says: another attempt (after a backoff:
        a :class:`Sleep`), or the call's final result. Raises the tool's error when the call ends on
        it and ``handle_tool_errors`` says so."""
        left = self.ledger.remaining().wall_s if self.ledger is not None else None
        st.flow, step = self.engine.after(st.flow, verdict, wall_left_s=left)
        if isinstance(step, Act | Sleep):
            return step
        if isinstance(step, Ask):
            return self.ask(st, step.verdict)
        if isinstance(step, Finish) and step.status == "accepted":
            return self._accepted(st, verdict, ending=None)
        if st.error is not None:  # a refine or stop on the tool's own error ends as ToolNode ends it
            return self._failed(st, verdict, st.error)
        if isinstance(step, Finish) and step.status == "refine":
            return self._final(st, verdict, verdict.feedback or verdict.reason, "error")
        return self._stop(st, verdict, verdict.reason)

    def _accepted(self, st: CallState, verdict: Verdict, *, ending: FinishStatus | None) -> ToolResult:
        result = st.result
        if result is None:  # only a journaled ask resumed without its result; never a normal path
            return self._final(st, verdict, st.content or "", "success", ending=ending)
        flow = st.flow
        if isinstance(result, ToolMessage) and (flow.attempt > 1 or flow.switches or ending is not None):
            result = _annotated(result, st.call, self._info(st, verdict, ending=ending, reason=None))
        if self.result_key is not None:
            result = self._typed(st, result, verdict, ending)
        return self._journaled(st, result) if st.journal_key else result

    def _failed(self, st: CallState, verdict: Verdict, error: BaseException) -> ToolResult:
        reported = getattr(error, "message", None)
        if isinstance(reported, ToolMessage):  # execute's own error message: it goes back as it came
            message: ToolMessage | None = reported
        else:
            call = {"name": st.target, "id": st.call.get("id")}
            message = self.errors.tool_error(error, call)
        if message is None:
            raise error
        if st.attempt > 1 or st.switches:
            message = _annotated(message, st.call, self._info(st, verdict, ending=None, reason=None))
        return self._journaled(st, self._typed(st, message, verdict, None))

    def ask(self, st: CallState, verdict: Verdict) -> ToolResult | Act:
        """Put ``verdict`` to a person (the engine counted the question): the placeholder of a call
        that waits while the node puts it, else what the reply decides (a result, or another
        attempt on an extended budget)."""
        if st.asked:  # resumed at this question: it is journaled already
            st.asked = False
        elif st.journal_key:
            put_later(
                self.journal,
                st.journal_key,
                {
                    "phase": "ask",
                    "asks": st.asks,
                    "target": st.target,
                    "tried": list(st.flow.tried),
                    "attempt": st.attempt,
                    "switches": st.switches,
                    "content": st.content,
                    "result": None if st.result is None else dump_result(st.result),
                    "verdict": verdict.model_dump(mode="json"),
                },
            )
        best = None if st.content is None else {"answer": st.content, "text": st.content, "model": st.target}
        question = f"Tool call {st.call['name']}({st.call.get('args')})"
        call_id = str(st.call.get("id") or "")
        payload = ask_payload(verdict, step_id=st.step_id, question=question, best=best, tool_call_id=call_id)
        reply = reply_to(call_id, st.asks, payload)
        if reply is None:
            return waiting(st.call)  # the node puts the question, then runs the call again
        self.emitter.reply(step_id=st.step_id, reply=reply.model_dump(mode="json"))
        # Logged as the verdict that ends the attempt, so the call's last record says how it ended.
        st.flow, decided, step = self.engine.reply(st.flow, verdict, reply)
        self.emitter.verdict(
            decided,
            step_id=st.step_id,
            attempt=st.attempt,
            target="user" if reply.action == "answer" else st.target,
            candidates_summary={"tool": st.target, "args": st.call.get("args")},
            latency_ms=0.0,
            extra=reply_extra(reply),
            call_made=False,  # a person's reply decided: nothing was called
        )
        if isinstance(step, Extend):
            # The reply raises the ledger's limits: the calls it allows are reserved and committed
            # like any other, so the totals (and every later verdict's evidence) include them.
            if self.ledger is not None:
                self.ledger.extend(Usage.model_validate(dict(step.amounts)))
            return step.then
        assert isinstance(step, Finish)
        if step.status == "accepted":  # by the person: the record says so, even on a first try
            return self._accepted(st, decided, ending="accepted")
        if step.status == "answered_by_user":
            return self._final(st, decided, reply.answer or "", "success", ending="answered_by_user")
        return self._stop(st, decided, decided.reason)

    def _stop(self, st: CallState, verdict: Verdict, reason: str) -> ToolResult:
        text = (
            f"retryctl stopped this tool call: {reason}. Do not call {st.call['name']} again for this; "
            "answer with what you have."
        )
        return self._final(st, verdict, text, "error", ending="stopped", reason=reason)

    def _info(
        self, st: CallState, verdict: Verdict, *, ending: FinishStatus | None, reason: str | None
    ) -> dict[str, Any]:
        """retryctl's record of the call; ``ending`` is how the engine said it finished when that is
        not read off the verdict (a person accepted or answered, or the call stopped)."""
        return {
            "action": verdict.action.value,
            "reason": reason or verdict.reason,
            "confidence": verdict.confidence,
            "served_by": "user" if ending == "answered_by_user" else st.target,
            "attempts": st.attempt,
            "status": ending or _STATUS.get(verdict.action, "refine"),
            "verdict": verdict.model_dump(mode="json"),
        }

    def _final(
        self,
        st: CallState,
        verdict: Verdict,
        content: str,
        status: str,
        *,
        ending: FinishStatus | None = None,
        reason: str | None = None,
    ) -> ToolResult:
        """A message retryctl writes itself (a failed check, a stop, a person's answer)."""
        message = ToolMessage(
            content=content,
            name=st.call["name"],
            tool_call_id=st.call["id"],
            status=status,
            response_metadata={METADATA_KEY: self._info(st, verdict, ending=ending, reason=reason)},
        )
        return self._journaled(st, self._typed(st, message, verdict, ending))

    def _journaled(self, st: CallState, result: ToolResult) -> ToolResult:
        if st.journal_key:
            put_later(self.journal, st.journal_key, {"phase": "final", "result": dump_result(result)})
        return result

    def _typed(
        self, st: CallState, result: ToolResult, verdict: Verdict, ending: FinishStatus | None
    ) -> ToolResult:
        """With ``result_key``: the message plus the call's typed result, as one ``Command``."""
        if self.result_key is None or not isinstance(result, ToolMessage):
            return result
        info = verdict_of(result) or self._info(st, verdict, ending=ending, reason=None)
        text = result.content if isinstance(result.content, str) else result.text
        ok = result.status != "error"
        typed = {
            "status": info["status"],
            "answer": text if ok else None,
            "text": text,
            "confidence": info["confidence"],
            "reason": info["reason"],
            "served_by": info["served_by"],
            "usage": dict(self.ledger.snapshot().used) if self.ledger is not None else {},
            "attempts": info["attempts"],
        }
        return Command(update={self.messages_key: [result], self.result_key: typed})


def _annotated(message: ToolMessage, call: dict[str, Any], info: dict[str, Any]) -> ToolMessage:
    """``message`` with retryctl's record added to its ``response_metadata``, and named after the tool
    the model called (a backup answers the model's call: ``served_by`` names the backup)."""
    metadata = {**message.response_metadata, METADATA_KEY: info}
    return message.model_copy(update={"response_metadata": metadata, "name": call["name"]})
