"""What a tool call ends with: the ``ToolMessage`` (or ``Command``) for each verdict, journaled so a
resumed node returns it again instead of redoing the call."""

from __future__ import annotations

import math
from typing import Any

from langchain_core.messages import ToolMessage
from langgraph.types import Command

from retryctl.controller import Action, Ledger, StepLedger, Usage, Verdict
from retryctl.nodes._events import Emitter
from retryctl.nodes._interrupt import ask_payload, reply_extra, reply_verdict
from retryctl.nodes._journal import ToolJournal
from retryctl.nodes._tool_ask import reply_to, waiting
from retryctl.nodes._tool_state import CallState

__all__ = ["ToolOutcomes"]

_COUNTS = frozenset({"attempts", "samples", "input_tokens", "output_tokens"})


def _extension(budget: dict[str, float]) -> Usage:
    """A reply's ``budget`` as amounts to add to the limits. A tool call costs attempts, so a reply
    that names none grants one more (as documented); a count asked for in part is granted whole."""
    amounts = {"attempts": 1.0, **budget}
    return Usage.model_validate({n: math.ceil(v) if n in _COUNTS else v for n, v in amounts.items()})


class ToolOutcomes:
    """Acting on a tool call's verdict (a mixin of :class:`ToolCallController`, which owns the settings)."""

    journal: ToolJournal
    emitter: Emitter
    ledger: Ledger | StepLedger | None
    messages_key: str
    result_key: str | None

    def after(self, st: CallState, verdict: Verdict) -> ToolMessage | Command[Any] | None:
        """The final message for ``verdict``, or ``None`` to run another attempt (switch, extend)."""
        if verdict.action is Action.SWITCH:
            st.tried.append(st.target)
            st.target = verdict.switch_to or st.target
            st.switches += 1
            st.retries = 0
            return None
        if verdict.action is Action.RETRY:
            return None
        if verdict.action is Action.ACCEPT:
            if st.command is not None:
                # A tool that returned a Command (a state update, a handoff) is passed on as it is.
                return st.command
            return self._final(st, verdict, st.content or "", "success")
        if verdict.action is Action.REFINE:
            return self._final(st, verdict, verdict.feedback or verdict.reason, "error")
        if verdict.action is Action.ASK_USER:
            return self._ask(st, verdict)
        return self._stop(st, verdict, verdict.reason)

    def _ask(self, st: CallState, verdict: Verdict) -> ToolMessage | Command[Any] | None:
        if st.asked:  # resumed at this question: it is journaled already
            st.asked = False
        else:
            st.asks += 1
            if st.journal_key:
                self.journal.put(
                    st.journal_key,
                    {
                        "phase": "ask",
                        "asks": st.asks,
                        "target": st.target,
                        "tried": st.tried,
                        "attempt": st.attempt,
                        "switches": st.switches,
                        "content": st.content,
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
        decided = reply_verdict(reply, verdict)
        self.emitter.verdict(
            decided,
            step_id=st.step_id,
            attempt=st.attempt,
            target="user" if reply.action == "answer" else st.target,
            candidates_summary={"tool": st.target, "args": st.call.get("args")},
            latency_ms=0.0,
            extra=reply_extra(reply),
        )
        if reply.action == "accept":
            return self._final(st, decided, st.content or "", "success", how="accepted by the user")
        if reply.action == "answer":
            return self._final(st, decided, reply.answer or "", "success", how=decided.reason)
        if reply.action == "extend":
            # The reply raises the ledger's limits: the calls it allows are reserved and committed
            # like any other, so the totals (and every later verdict's evidence) include them.
            if self.ledger is not None:
                self.ledger.extend(_extension(reply.budget))
            st.retries = 0
            return None
        return self._stop(st, decided, decided.reason)

    def _stop(self, st: CallState, verdict: Verdict, reason: str) -> ToolMessage | Command[Any]:
        text = (
            f"retryctl stopped this tool call: {reason}. Do not call {st.call['name']} again for this; "
            "answer with what you have."
        )
        return self._final(st, verdict, text, "error", how="stopped", reason=reason)

    def _final(
        self,
        st: CallState,
        verdict: Verdict,
        content: str,
        status: str,
        *,
        how: str | None = None,
        reason: str | None = None,
    ) -> ToolMessage | Command[Any]:
        statuses = {
            "accepted by the user": "accepted",
            "answered by the user": "answered_by_user",
            "stopped": "stopped",
        }
        info = {
            "action": verdict.action.value,
            "reason": reason or verdict.reason,
            "confidence": verdict.confidence,
            "served_by": "user" if how == "answered by the user" else st.target,
            "attempts": st.attempt,
            "status": statuses.get(how or "", "accepted" if verdict.action is Action.ACCEPT else "refine"),
            "verdict": verdict.model_dump(mode="json"),
        }
        record = {"content": content, "status": status, "info": info}
        if st.journal_key:
            self.journal.put(st.journal_key, {"phase": "final", "message": record})
        return self._message(st.call, record)

    def _message(self, call: dict[str, Any], record: dict[str, Any]) -> ToolMessage | Command[Any]:
        message = ToolMessage(
            content=record["content"],
            name=call["name"],
            tool_call_id=call["id"],
            status=record["status"],
            artifact={"retryctl": record["info"]},
        )
        if self.result_key is None:
            return message
        info = record["info"]
        result = {
            "status": info["status"],
            "answer": record["content"] if record["status"] == "success" else None,
            "text": record["content"],
            "confidence": info["confidence"],
            "reason": info["reason"],
            "served_by": info["served_by"],
            "usage": dict(self.ledger.snapshot().used) if self.ledger is not None else {},
            "attempts": info["attempts"],
        }
        return Command(update={self.messages_key: [message], self.result_key: result})
