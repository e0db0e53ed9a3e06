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
from retryctl.controller import (
    Ask,
    AttemptEngine,
    AttemptState,
    Budget,
    Clock,
    Extend,
    Finish,
    Ledger,
    Request,
    Sleep,
    Verdict,
)
from retryctl.models._messages import normalise_messages
from retryctl.nodes._backoff import WaitRetryAfter
from retryctl.nodes._events import Emitter
from retryctl.nodes._interrupt import ask, ask_payload, reply_extra
from retryctl.nodes._state import ControlState, StepResult, StepState, StepVerdict

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
    engine: AttemptEngine
    names: list[str]

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

    def _attempt_state(self, control: ControlState) -> AttemptState:
        """The engine's state of this step, as kept in ``control``."""
        return AttemptState.from_json(
            {**control, "group": self.names, "target": control.get("target") or self.names[0]}
        )

    @staticmethod
    def _keep(control: ControlState, attempt: AttemptState) -> ControlState:
        """``control`` with the engine's ``attempt`` state written into it (the group is the step's own)."""
        kept = attempt.to_json()
        del kept["group"]
        return {**control, **kept}  # type: ignore[typeddict-item]

    def _move_on(self, state: StepState, **after: Any) -> tuple[ControlState, Request]:
        """The engine's transition after the last verdict: the new control and the request to do."""
        control = state["control"]
        verdict = Verdict.model_validate(control.get("last_verdict") or {})
        attempt, request = self.engine.after(self._attempt_state(control), verdict, **after)
        return self._keep(control, attempt), request

    def _refine(self, state: StepState) -> Command[str]:
        best = state["control"].get("best") or {}
        control, _ = self._move_on(state, previous=best.get("text"))
        return Command(update={"control": control}, goto="act")

    def _switch(self, state: StepState) -> Command[str]:
        control, _ = self._move_on(state)
        return Command(update={"control": control}, goto="act")

    def _retry_plan(self, state: StepState) -> tuple[ControlState, float]:
        control, request = self._move_on(state, wall_left_s=self._wall_left(state["control"]))
        return control, request.seconds if isinstance(request, Sleep) else 0.0

    def _wall_left(self, control: ControlState) -> float:
        # The wall time left at any scope (the step's or the run's); the engine caps the backoff at it.
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
        control, request = self._move_on(state)
        if isinstance(request, Finish):
            # Nobody can answer (a batch job, CI): end the step instead of pausing it forever. The
            # ask_user verdict, already logged, is how it ended.
            result = self._result(state, control, status=request.status, reason=request.verdict.reason)
            return Command(update={"result": result}, goto=END)
        assert isinstance(request, Ask)
        verdict = request.verdict
        messages = normalise_messages(state["messages"])
        question = next((str(m["content"]) for m in reversed(messages) if m["role"] == "user"), "")
        reply = ask(ask_payload(verdict, step_id=self.step_id, question=question, best=control.get("best")))
        self.emitter.reply(step_id=self.step_id, reply=reply.model_dump(mode="json"))
        # The reply ends the attempt as a verdict would, and is logged as one: the step's last record
        # says how it ended (accepted, answered, stopped), or that it goes on with a larger budget.
        attempt = control.get("attempt", 1)
        previous = (control.get("best") or {}).get("text")  # quoted back by a refine it allows
        after, decided, request = self.engine.reply(
            self._attempt_state(control), verdict, reply, previous=previous
        )
        target = "user" if reply.action == "answer" else control.get("target")
        self.emitter.verdict(
            decided,
            step_id=self.step_id,
            attempt=attempt,
            target=target,
            candidates_summary=None,  # a person, not a draw: the reply is in ``extra``
            latency_ms=control.get("latency_ms", 0.0),
            extra=reply_extra(reply),
            call_made=False,  # a person's reply decided: no model was called
        )
        dumped = decided.model_dump(mode="json")
        control["last_verdict"] = dumped
        history = [StepVerdict(attempt=attempt, target=target, verdict=dumped)]
        if isinstance(request, Extend):
            extra = dict(control.get("extra_budget", {}))
            for name, amount in request.amounts.items():
                extra[name] = extra.get(name, 0.0) + amount
            control = self._keep({**control, "extra_budget": extra}, after)
            return Command(update={"control": control, "verdicts": history}, goto="act")
        assert isinstance(request, Finish)
        if request.status == "stopped":
            control["stop_reason"] = decided.reason
            return Command(update={"control": control, "verdicts": history}, goto="stop")
        fields: dict[str, Any] = {"status": request.status}
        if request.status == "answered_by_user":
            fields.update(answer=reply.answer, text=reply.answer, served_by="user")
        result = self._result(state, control, **fields)
        return Command(
            update={
                "result": result,
                "messages": [AIMessage(content=result["text"] or "")],
                "verdicts": history,
                "control": control,
            },
            goto=END,
        )


def _served_by(state: StepState, best: dict[str, Any]) -> str | None:
    """The member (model of the group) that drew ``best``: the target of the attempt it came from."""
    if not best:
        return None
    for record in state.get("verdicts") or []:
        if record["attempt"] == best.get("attempt") and record["target"] not in (None, "user"):
            return record["target"]
    model = best.get("model")
    return None if model is None else str(model)
