"""One wrapped tool call: validate the arguments, call (tenacity retries transient faults), check the
result, and act on the verdict (accept, refine, switch within the equivalence group, ask the user, stop).

:class:`ToolCallController` holds everything the sync and async runs share; the two runners in
``_tool_node`` only loop and do the I/O. Every verdict comes from :func:`~retryctl.controller.decide`,
including the one that tells tenacity whether to retry.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from langchain_core.messages import HumanMessage, ToolCall, ToolMessage
from langchain_core.tools import BaseTool, ToolException
from langgraph.errors import GraphBubbleUp
from langgraph.prebuilt.tool_node import ToolCallRequest
from langgraph.types import Command
from pydantic import BaseModel
from tenacity import RetryCallState

from retryctl.controller import (
    Action,
    Breaker,
    Classification,
    Clock,
    ErrorClass,
    Exhaustion,
    Ledger,
    Observation,
    Policy,
    Reservation,
    StepLedger,
    Usage,
    ValidatorResult,
    Verdict,
    classify,
    decide,
)
from retryctl.controller._breaker import StoreFault
from retryctl.controller._clock import monotonic
from retryctl.exceptions import BreakerOpen, BreakerStoreError
from retryctl.nodes._events import Emitter
from retryctl.nodes._journal import ToolJournal
from retryctl.nodes._tool_ask import call_key
from retryctl.nodes._tool_outcome import ToolOutcomes
from retryctl.nodes._tool_state import ArgsAdapter, CallState, ResultValidator, is_idempotent

__all__ = ["ToolCallController"]

_ONE_ATTEMPT = Usage(attempts=1)


class _Refused(Exception):
    """The budget refused a call: raised inside the tenacity loop so decide() sees the exhaustion."""

    def __init__(self, exhaustion: Exhaustion) -> None:
        self.exhaustion = exhaustion
        super().__init__(str(exhaustion))


class _ToolReportedError(ToolException, ValueError):
    """A tool returned an error ToolMessage instead of raising (``handle_tool_error=True``).

    Such a tool is telling the model what was wrong with its input, so it classifies as a
    validation error (a ``ValueError``): the verdict is a refine carrying the tool's own message."""


def _content_text(message: ToolMessage) -> str:
    return message.content if isinstance(message.content, str) else message.text


class ToolCallController(ToolOutcomes):
    """The shared logic of a controlled tool call (see the module docstring)."""

    def __init__(
        self,
        *,
        tools: Mapping[str, BaseTool],
        groups: Mapping[str, Sequence[str]],
        validators: Mapping[str, Sequence[ResultValidator]],
        adapters: Mapping[str, ArgsAdapter],
        policy: Policy,
        breaker: Breaker | None,
        ledger: Ledger | StepLedger | None,
        emitter: Emitter,
        journal: ToolJournal,
        messages_key: str,
        result_key: str | None,
        clock: Clock = monotonic,
    ) -> None:
        self.tools = tools
        self.groups = groups
        self.validators = validators
        self.adapters = adapters
        self.policy = policy
        self.breaker = breaker
        self.ledger = ledger
        self.emitter = emitter
        self.journal = journal
        self.messages_key = messages_key
        self.result_key = result_key
        self.clock = clock

    # -- starting and resuming -------------------------------------------------------------------

    def begin(self, request: ToolCallRequest) -> CallState | ToolMessage | Command[Any]:
        """A fresh call state, or the journaled final message of a call that already ended."""
        call = dict(request.tool_call)
        config = getattr(request.runtime, "config", None) or {}
        key = call_key((config.get("configurable") or {}).get("thread_id"), call.get("id"))
        record = self.journal.get(key) if key else None
        if record is not None and record.get("phase") == "final":
            return self._message(call, record["message"])
        name = str(call["name"])
        st = CallState(
            call=call,
            journal_key=key,
            target=name,
            group=list(self.groups.get(name, [name])),
            refines=self._refines_so_far(request.state, name),
        )
        if record is not None and record.get("phase") == "ask":
            st.target = record["target"]
            st.tried = list(record["tried"])
            st.attempt = int(record["attempt"])
            st.switches = int(record["switches"])
            st.content = record["content"]
            st.pending_ask = Verdict.model_validate(record["verdict"])
            st.asks = int(record.get("asks", 1))
            st.asked = True
        return st

    def _refines_so_far(self, state: Any, name: str) -> int:
        messages = state.get(self.messages_key, []) if isinstance(state, dict) else state
        count = 0
        for message in reversed(messages or []):
            if isinstance(message, HumanMessage):
                break
            verdict = (getattr(message, "artifact", None) or {}) if isinstance(message, ToolMessage) else {}
            info = verdict.get("retryctl", {}) if isinstance(verdict, dict) else {}
            if message.name == name and info.get("action") == "refine":
                count += 1
        return count

    # -- one attempt: prepared here, executed by the runner ---------------------------------------

    def prepare(
        self, st: CallState, request: ToolCallRequest
    ) -> tuple[ToolCallRequest | str, Reservation | None]:
        """Check arguments, breaker and budget; return the request to execute and its reservation,
        or the journaled result of a non-idempotent tool that already ran. Refusals raise, so the
        tenacity loop hands them to :meth:`should_retry` like any failure."""
        st.attempt += 1
        st.started = self.clock()
        tool = self.tools[st.target]
        if not is_idempotent(tool) and st.journal_key:
            done = self.journal.get(f"{st.journal_key}/result/{st.target}")
            if done is not None:
                return str(done["content"]), None
        args = dict(st.call.get("args") or {})
        if st.target != st.call["name"] and st.target in self.adapters:
            args = self.adapters[st.target](args)
        schema = tool.tool_call_schema
        if isinstance(schema, type) and issubclass(schema, BaseModel):
            schema.model_validate(args)  # first: a malformed call costs nothing and takes no probe slot
        if self.breaker is not None:
            # admit, not allow: a breaker store that is down is decided on (fail open or closed), not raised.
            admission = self.breaker.admit(st.target)
            if admission.fault is not None:
                st.notes.append(str(admission.fault))
            if admission.refused is not None:
                raise admission.refused
        reservation = None
        if self.ledger is not None:
            held = self.ledger.try_reserve(_ONE_ATTEMPT)
            if isinstance(held, Exhaustion):
                raise _Refused(held)  # a person's "extend" raises the limit instead (see ToolOutcomes)
            reservation = held
        call = ToolCall(name=st.target, args=args, id=st.call.get("id"), type="tool_call")
        return request.override(tool=tool, tool_call=call), reservation

    def settle(
        self, st: CallState, reservation: Reservation | None, result: ToolMessage | Command[Any]
    ) -> ToolMessage | Command[Any]:
        """Account for a finished call; a tool that reported an error raises it into the retry loop."""
        failed = isinstance(result, ToolMessage) and result.status == "error"
        if reservation is not None:
            reservation.commit(_ONE_ATTEMPT)  # a call that ran and failed still cost an attempt
        if failed:
            assert isinstance(result, ToolMessage)
            raise _ToolReportedError(_content_text(result))
        if self.breaker is not None:
            self._note(st, self.breaker.report(st.target, failed=False))
        st.command = result if isinstance(result, Command) else None
        if isinstance(result, ToolMessage):
            st.content = _content_text(result)
            if st.journal_key and not is_idempotent(self.tools[st.target]):
                self.journal.put(f"{st.journal_key}/result/{st.target}", {"content": st.content})
        return result

    # -- verdicts ------------------------------------------------------------------------------------

    def _decide(
        self,
        st: CallState,
        *,
        error: Classification | None = None,
        exhausted: Exhaustion | None = None,
        validators: Sequence[ValidatorResult] = (),
    ) -> Verdict:
        snapshot = self.ledger.snapshot() if self.ledger is not None else None
        breakers: dict[str, str] = {}
        if self.breaker is not None:
            breakers, unknown = self.breaker.snapshot()
            self._note(st, unknown)
        notes, st.notes = st.notes, []
        obs = Observation(
            target=st.target,
            alternatives=_after(st.group, st.target, st.tried),
            validators=validators,
            error=error,
            attempt=st.attempt,
            retries=st.retries,
            refines=st.refines,
            switches=st.switches,
            budget_used=snapshot.used if snapshot else {},
            budget_limit=snapshot.limit if snapshot else {},
            exhausted=exhausted,
            breakers=breakers,
            notes=notes,
        )
        verdict = decide(obs, self.policy)
        self.emitter.verdict(
            verdict,
            step_id=st.step_id,
            attempt=st.attempt,
            target=st.target,
            candidates_summary={"tool": st.target, "args": st.call.get("args")},
            latency_ms=0.0 if st.started is None else (self.clock() - st.started) * 1000.0,
        )
        return verdict

    def on_failure(self, st: CallState, exc: BaseException) -> Verdict:
        """The verdict on a failed call (a refused budget, an open breaker, bad args or a fault)."""
        if isinstance(exc, _Refused):
            return self._decide(st, exhausted=exc.exhaustion)
        error = classify(exc)
        counts = error.error_class in (ErrorClass.TRANSIENT, ErrorClass.TERMINAL)
        # A refusal (an open breaker, or a store failing closed) is no failure of the target's own.
        if self.breaker is not None and counts and not isinstance(exc, BreakerOpen | BreakerStoreError):
            self._note(st, self.breaker.report(st.target, failed=True))
        return self._decide(st, error=error)

    @staticmethod
    def _note(st: CallState, fault: StoreFault | None) -> None:
        if fault is not None:
            st.notes.append(str(fault))

    def should_retry(self, st: CallState, box: list[Verdict]) -> Callable[[RetryCallState], bool]:
        """tenacity's ``retry=`` predicate: retry exactly when decide() says ``retry``."""

        def predicate(state: RetryCallState) -> bool:
            outcome = state.outcome
            if outcome is None or not outcome.failed:
                return False
            exc = outcome.exception()
            if exc is None or isinstance(exc, GraphBubbleUp):
                return False
            verdict = self.on_failure(st, exc)
            box.append(verdict)
            if verdict.action is Action.RETRY:
                st.retries += 1
                return True
            return False

        return predicate

    def on_success(self, st: CallState, result: ToolMessage | Command[Any]) -> Verdict:
        """The verdict on a result: the built-in ``call_succeeded`` check plus the tool's validators."""
        checks = [ValidatorResult("call_succeeded", True)]
        if isinstance(result, ToolMessage):
            args = dict(st.call.get("args") or {})
            for validator in self.validators.get(st.target, ()):
                checks.append(_run(validator, st.content or "", args))
        return self._decide(st, validators=checks)


def _after(group: Sequence[str], key: str, tried: Sequence[str]) -> list[str]:
    """The members to try instead of ``key``: those after it, then (wrapping round) those before it,
    as :meth:`retryctl.tools.ToolRegistry.alternatives` orders them."""
    if key not in group:
        return [m for m in group if m not in tried]
    start = group.index(key)
    return [m for m in (*group[start + 1 :], *group[:start]) if m not in tried]


def _run(validator: ResultValidator, content: str, args: dict[str, Any]) -> ValidatorResult:
    name = getattr(validator, "__name__", type(validator).__name__)
    try:
        out = validator(content, args)
    except Exception as exc:
        # The evidence goes back to the model: the exception's one-line summary, never a traceback.
        return ValidatorResult(name, False, f"{type(exc).__name__}: {exc}")
    return out if isinstance(out, ValidatorResult) else ValidatorResult(name, bool(out))
