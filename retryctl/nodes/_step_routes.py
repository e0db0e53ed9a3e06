"""The six routes out of ``decide`` in a controlled step: accept, refine, retry, switch, ask_user, stop.

Each is a node that applies the verdict to the state and goes on (``Command(goto=...)``): back to ``act``
for another attempt, or to ``END`` with a :class:`~retryctl.nodes.StepResult`.
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable
from typing import Any

from langchain_core.messages import AIMessage
from langgraph.graph import END
from langgraph.types import Command

from retryctl._turn import yielded_turn
from retryctl.controller import Budget, Clock, Ledger, Verdict
from retryctl.models._messages import normalise_messages
from retryctl.nodes._backoff import WaitRetryAfter, backoff_seconds
from retryctl.nodes._events import Emitter
from retryctl.nodes._interrupt import ask, ask_payload, reply_extra, reply_verdict
from retryctl.nodes._state import ControlState, StepResult, StepState, VerdictRecord

__all__ = ["StepRoutes"]


class StepRoutes:
    """The route nodes of :class:`~retryctl.nodes.ControlledStep` (a mixin: it owns the settings)."""

    backoff: WaitRetryAfter
    clock: Clock
    sleep: Callable[[float], None]
    asleep: Callable[[float], Awaitable[None]]
    budget: Budget
    run_ledger: Ledger | None
    step_id: str
    interactive: bool
    emitter: Emitter

    def limits(self, extra: dict[str, float]) -> dict[str, float | None]:
        """The step's limits with the user's extensions added."""
        limits = self.budget.limits()
        for name, amount in extra.items():
            current = limits.get(name)
            if current is not None:
                limits[name] = current + amount
        return limits

    def _result(self, state: StepState, control: ControlState, **fields: Any) -> StepResult:
        verdict = control.get("last_verdict") or {}
        best = control.get("best") or {}
        base = StepResult(
            status="stopped",
            answer=verdict.get("answer") or best.get("answer"),
            text=best.get("text"),
            confidence=verdict.get("confidence"),
            reason=str(verdict.get("reason", "")),
            served_by=_served_by(state, best),
            usage=dict(state.get("usage", {})),
            limits=self.limits(dict(control.get("extra_budget", {}))),
            attempts=control.get("attempt", 0),
        )
        return {**base, **fields}  # type: ignore[typeddict-item]

    def _accept(self, state: StepState) -> Command[str]:
        control = state["control"]
        result = self._result(state, control, status="accepted")
        messages = [AIMessage(content=result["text"] or "")]
        return Command(update={"result": result, "messages": messages}, goto=END)

    def _stop(self, state: StepState) -> Command[str]:
        control = state["control"]
        reason = control.get("stop_reason") or (control.get("last_verdict") or {}).get("reason", "")
        return Command(update={"result": self._result(state, control, reason=reason)}, goto=END)

    def _refine(self, state: StepState) -> Command[str]:
        control: ControlState = {**state["control"]}
        verdict = Verdict.model_validate(control.get("last_verdict") or {})
        best = control.get("best") or {}
        control["feedback"] = [
            *control.get("feedback", []),
            {"previous": best.get("text"), "feedback": verdict.feedback or verdict.reason},
        ]
        control["refines"] = control.get("refines", 0) + 1
        control["retries"] = 0
        return Command(update={"control": control}, goto="act")

    def _switch(self, state: StepState) -> Command[str]:
        control: ControlState = {**state["control"]}
        verdict = Verdict.model_validate(control.get("last_verdict") or {})
        current = control.get("target")
        control["tried"] = [
            *control.get("tried", []),
            *([current] if current else []),
        ]
        control["target"] = verdict.switch_to
        control["switches"] = control.get("switches", 0) + 1
        control["retries"] = 0
        return Command(update={"control": control}, goto="act")

    def _retry_plan(self, state: StepState) -> tuple[ControlState, float]:
        control: ControlState = {**state["control"]}
        verdict = Verdict.model_validate(control.get("last_verdict") or {})
        control["retries"] = control.get("retries", 0) + 1
        wait = backoff_seconds(
            self.backoff, retry_number=control["retries"], retry_after_s=verdict.retry_after_s
        )
        return control, min(wait, self._wall_left(control))

    def _wall_left(self, control: ControlState) -> float:
        # A backoff never sleeps past a wall-time limit (the step's or the run's): the next attempt is
        # refused there, and the step stops within its budget instead of after it.
        left = math.inf
        limit = self.limits(dict(control.get("extra_budget", {}))).get("wall_s")
        if limit is not None:
            left = limit - control.get("elapsed_s", 0.0)
        run_left = self.run_ledger.remaining().wall_s if self.run_ledger is not None else None
        if run_left is not None:
            left = min(left, run_left)
        return max(0.0, left)

    def _retry(self, state: StepState) -> Command[str]:
        control, wait = self._retry_plan(state)
        start = self.clock()
        self.sleep(wait)
        control["elapsed_s"] = control.get("elapsed_s", 0.0) + (self.clock() - start)
        return Command(update={"control": control}, goto="act")

    async def _aretry(self, state: StepState) -> Command[str]:
        control, wait = self._retry_plan(state)
        start = self.clock()
        async with yielded_turn():
            await self.asleep(wait)
        control["elapsed_s"] = control.get("elapsed_s", 0.0) + (self.clock() - start)
        return Command(update={"control": control}, goto="act")

    def _ask_user(self, state: StepState) -> Command[str]:
        control: ControlState = {**state["control"]}
        if not self.interactive:
            # Nobody can answer (a batch job, CI): end the step instead of pausing it forever. The
            # ask_user verdict, already logged, is how it ended.
            reason = str((control.get("last_verdict") or {}).get("reason", ""))
            result = self._result(state, control, status="needs_user", reason=reason)
            return Command(update={"result": result}, goto=END)
        verdict = Verdict.model_validate(control.get("last_verdict") or {})
        messages = normalise_messages(state["messages"])
        question = next((str(m["content"]) for m in reversed(messages) if m["role"] == "user"), "")
        reply = ask(ask_payload(verdict, step_id=self.step_id, question=question, best=control.get("best")))
        self.emitter.reply(step_id=self.step_id, reply=reply.model_dump(mode="json"))
        # The reply ends the attempt as a verdict would, and is logged as one: the step's last record
        # says how it ended (accepted, answered, stopped), or that it goes on with a larger budget.
        decided = reply_verdict(reply, verdict)
        target = "user" if reply.action == "answer" else control.get("target")
        attempt = control.get("attempt", 1)
        self.emitter.verdict(
            decided,
            step_id=self.step_id,
            attempt=attempt,
            target=target,
            candidates_summary=None,  # a person, not a draw: the reply is in ``extra``
            latency_ms=control.get("latency_ms", 0.0),
            extra=reply_extra(reply),
        )
        dumped = decided.model_dump(mode="json")
        control["last_verdict"] = dumped
        history = [VerdictRecord(attempt=attempt, target=target, verdict=dumped)]
        if reply.action == "accept":
            result = self._result(state, control, status="accepted")
            return Command(
                update={
                    "result": result,
                    "messages": [AIMessage(content=result["text"] or "")],
                    "verdicts": history,
                    "control": control,
                },
                goto=END,
            )
        if reply.action == "answer":
            result = self._result(
                state,
                control,
                status="answered_by_user",
                answer=reply.answer,
                text=reply.answer,
                served_by="user",
            )
            return Command(
                update={
                    "result": result,
                    "messages": [AIMessage(content=reply.answer or "")],
                    "verdicts": history,
                    "control": control,
                },
                goto=END,
            )
        if reply.action == "extend":
            extra = dict(control.get("extra_budget", {}))
            for name, amount in reply.budget.items():
                extra[name] = extra.get(name, 0.0) + amount
            control["extra_budget"] = extra
            control["retries"] = 0
            return Command(update={"control": control, "verdicts": history}, goto="act")
        control["stop_reason"] = decided.reason
        return Command(update={"control": control, "verdicts": history}, goto="stop")


def _served_by(state: StepState, best: dict[str, Any]) -> str | None:
    """The member (model of the group) that drew ``best``: the target of the attempt it came from."""
    if not best:
        return None
    for record in state.get("verdicts") or []:
        if record["attempt"] == best.get("attempt") and record["target"] not in (None, "user"):
            return record["target"]
    model = best.get("model")
    return None if model is None else str(model)
