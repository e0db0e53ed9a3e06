"""One wrapped tool call: check breaker and budget, call, check the result, and judge it.

:class:`ToolCallController` holds everything the sync and async runs share; the two runners in
``_tool_calls`` only loop and do the I/O. Every verdict, and every step after it (a retry after a
backoff, a switch within the equivalence group, a refine, a question, the end), is the attempt
engine's (:class:`~retryctl.controller.AttemptEngine`): this module measures, the engine decides.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from langchain_core.messages import HumanMessage, ToolCall, ToolMessage
from langchain_core.tools import BaseTool, ToolException
from langgraph.prebuilt.tool_node import ToolCallRequest
from pydantic import BaseModel, ValidationError

from retryctl.controller import (
    AttemptEngine,
    Breaker,
    Classification,
    Clock,
    ErrorClass,
    Exhaustion,
    Ledger,
    Policy,
    Reservation,
    StepLedger,
    Usage,
    ValidatorResult,
    Verdict,
    classify,
    run_check,
)
from retryctl.controller._breaker import StoreFault, counts_against
from retryctl.controller._clock import monotonic
from retryctl.controller._engine import Backoff, evolve
from retryctl.controller._error_rules import Classifier
from retryctl.exceptions import BreakerOpen, BreakerStoreError
from retryctl.nodes._events import Emitter
from retryctl.nodes._journal import ToolJournal, dump_result, load_result
from retryctl.nodes._tool_ask import call_key
from retryctl.nodes._tool_errors import ErrorHandling
from retryctl.nodes._tool_outcome import ToolOutcomes, verdict_of
from retryctl.nodes._tool_state import ArgsAdapter, CallState, ResultValidator, ToolResult, is_idempotent

__all__ = ["ToolCallController"]

_ONE_ATTEMPT = Usage(attempts=1)
_ONE_CHARGED = {"attempts": 1.0}
"""What an attempt that ran charges the ledger (``_ONE_ATTEMPT``), as a verdict's ``budget_charged``."""
_SUCCEEDED = (ValidatorResult("call_succeeded", True, check=False),)
"""The built-in result of a call: it returned one (frozen, so one for every call). No check of the
result: a call with no validators is accepted unchecked."""


class _Refused(Exception):
    """The budget refused a call: raised from :meth:`ToolCallController.prepare` so that
    :meth:`~ToolCallController.on_failure` judges the exhaustion."""

    def __init__(self, exhaustion: Exhaustion) -> None:
        self.exhaustion = exhaustion
        super().__init__(str(exhaustion))


class _ToolReportedError(ToolException, ValueError):
    """``execute`` returned an error ToolMessage instead of raising (a tool with
    ``handle_tool_error=True``, or ToolNode's own handling of bad arguments under a middleware).

    It is telling the model what was wrong with its input, so it classifies as a validation error
    (a ``ValueError``): a refine, and when that ends the call, the message goes back as it came."""

    def __init__(self, message: ToolMessage) -> None:
        self.message = message
        super().__init__(_content_text(message))


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
        errors: ErrorHandling,
        messages_key: str,
        result_key: str | None,
        backoff: Backoff,
        clock: Clock = monotonic,
        classifier: Classifier = classify,
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
        self.errors = errors
        self.messages_key = messages_key
        self.result_key = result_key
        self.clock = clock
        self.classifier = classifier
        # A refine goes back to the model that wrote the arguments; an extension grants one more call.
        self.engine = AttemptEngine(
            policy=policy, backoff=backoff, refine_in_place=False, grant={"attempts": 1.0}
        )

    # -- starting and resuming -------------------------------------------------------------------

    def begin(self, request: ToolCallRequest) -> CallState | ToolResult:
        """A fresh call state, or the journaled final result of a call that already ended."""
        call = dict(request.tool_call)
        config = getattr(request.runtime, "config", None) or {}
        key = call_key(config, call.get("id"))
        record = self.journal.get(key) if key else None
        if record is not None and record.get("phase") == "final":
            done: ToolResult = load_result(record["result"])
            return done
        name = str(call["name"])
        group = self.groups.get(name) or (name,)
        flow, _ = self.engine.start(group, target=name, refines=self._refines_so_far(request.state, name))
        st = CallState(call=call, journal_key=key, flow=flow, requested=request.tool)
        if record is not None and record.get("phase") == "ask":
            st.flow = evolve(
                flow,
                target=record["target"],
                tried=tuple(record["tried"]),
                attempt=int(record["attempt"]),
                switches=int(record["switches"]),
                asks=int(record.get("asks", 1)),
            )
            st.content = record["content"]
            st.result = load_result(record["result"]) if record.get("result") else None
            st.pending_ask = Verdict.model_validate(record["verdict"])
            st.asked = True
        return st

    def _refines_so_far(self, state: Any, name: str) -> int:
        """Error messages this tool already got in the current turn (since the last human message)."""
        if isinstance(state, list):
            messages: Any = state
        elif isinstance(state, Mapping):
            messages = state.get(self.messages_key, [])
        else:  # a Pydantic model or a dataclass as the graph's state
            messages = getattr(state, self.messages_key, [])
        count = 0
        for message in reversed(messages) if isinstance(messages, list) else reversed(list(messages or [])):
            if isinstance(message, HumanMessage):
                break
            if isinstance(message, ToolMessage) and message.name == name:
                # retryctl's record when it wrote one; else an error message is ToolNode's (or the
                # tool's own) answer to bad input, which the model is refining now.
                info = verdict_of(message)
                if (info.get("action") == "refine") if info is not None else message.status == "error":
                    count += 1
        return count

    # -- one attempt: prepared here, executed by the runner ---------------------------------------

    def prepare(
        self, st: CallState, request: ToolCallRequest
    ) -> tuple[ToolCallRequest | ToolResult, Reservation | None]:
        """Check breaker and budget; return the request to execute and its reservation, or the
        journaled result of a non-idempotent tool that already ran. Refusals raise, and are judged
        by :meth:`on_failure` like any failure. (The engine numbered the attempt when it moved on.)"""
        st.started = self.clock()
        tool = self._tool(st)
        target = st.flow.target
        if st.journal_key and not is_idempotent(tool):
            done = self.journal.get(f"{st.journal_key}/result/{target}")
            if done is not None:
                return load_result(done["result"]), None
        guarded = self.breaker is not None or self.ledger is not None
        if target == st.call["name"] and request.tool is tool:
            prepared = request  # the request as it came: nothing to override
            if not guarded:
                return prepared, None  # nothing to check the call against
            args = dict(st.call.get("args") or {})
        else:
            args = dict(st.call.get("args") or {})
            if target in self.adapters:
                args = self.adapters[target](args)
            call = ToolCall(name=target, args=args, id=st.call.get("id"), type="tool_call")
            prepared = request.override(tool=tool, tool_call=call)
        schema = tool.tool_call_schema if guarded else None  # a property that builds the schema
        if isinstance(schema, type) and issubclass(schema, BaseModel):
            try:
                schema.model_validate(args)
            except ValidationError:
                # A malformed call costs nothing and takes no probe slot: execute says what is wrong
                # (ToolNode's own ToolInvocationError, or its message) without running the tool.
                return prepared, None
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
            reservation = st.held = held
        return prepared, reservation

    def _tool(self, st: CallState) -> BaseTool:
        target = st.flow.target
        if st.requested is not None and target == st.call["name"]:
            return st.requested
        return self.tools[target]

    def settle(self, st: CallState, reservation: Reservation | None, result: ToolResult) -> ToolResult:
        """Account for a finished call; a tool that reported an error raises it into the retry loop."""
        failed = isinstance(result, ToolMessage) and result.status == "error"
        if reservation is not None:
            reservation.commit(_ONE_ATTEMPT)  # a call that ran and failed still cost an attempt
        if failed:
            assert isinstance(result, ToolMessage)
            raise _ToolReportedError(result)
        if self.breaker is not None:
            self._note(st, self.breaker.report(st.target, failed=False))
        if st.journal_key and not is_idempotent(self._tool(st)):
            self.journal.put(f"{st.journal_key}/result/{st.flow.target}", {"result": dump_result(result)})
        return result

    # -- verdicts ------------------------------------------------------------------------------------

    def _decide(
        self,
        st: CallState,
        *,
        error: Classification | None = None,
        exhausted: Exhaustion | None = None,
        validators: Sequence[ValidatorResult] = (),
        call_made: bool = True,
    ) -> Verdict:
        outcome: dict[str, Any] = {"validators": validators, "error": error, "exhausted": exhausted}
        if self.ledger is not None:
            snapshot = self.ledger.snapshot()
            outcome["budget_used"], outcome["budget_limit"] = snapshot.used, snapshot.limit
            # The ledger is shared by every call of the node (or the agent run): the record says so,
            # and what this attempt charged, so that an audit counts each call's spend once.
            outcome["budget_scope"] = "run"
            held, st.held = st.held, None
            outcome["budget_charged"] = _ONE_CHARGED if held is not None and held.state == "committed" else {}
            outcome["ledgers"] = (snapshot,)  # a retry, switch or refine must fit it (one attempt)
        if self.breaker is not None:
            outcome["breakers"], unknown = self.breaker.snapshot()
            self._note(st, unknown)
        if st.notes:
            outcome["notes"], st.notes = st.notes, []
        verdict = self.engine.judge(st.flow, **outcome)
        flow = st.flow
        self.emitter.verdict(
            verdict,
            step_id=st.step_id,
            attempt=flow.attempt,
            target=flow.target,
            candidates_summary={"tool": flow.target, "args": st.call.get("args")},
            latency_ms=0.0 if st.started is None else (self.clock() - st.started) * 1000.0,
            call_made=call_made,
        )
        return verdict

    def on_failure(self, st: CallState, exc: BaseException) -> Verdict:
        """The verdict on a failed call (a refused budget, an open breaker, bad args or a fault)."""
        if isinstance(exc, _Refused):
            st.error = None
            return self._decide(st, exhausted=exc.exhaustion, call_made=False)
        # An error message the tool returned is its report of bad input (a refine), whatever retry_on says.
        error = classify(exc) if isinstance(exc, _ToolReportedError) else self.classifier(exc)
        # The error a call may end on as ToolNode would end it: not a refusal (an open breaker, a store
        # failing closed), and not a transient fault, which is the controller's own business (retried,
        # switched, and when nothing is left stopped with its message, as a spent budget is).
        refused = isinstance(exc, BreakerOpen | BreakerStoreError)
        st.error = None if refused or error.error_class is ErrorClass.TRANSIENT else exc
        if self.breaker is not None and counts_against(error, exc):
            self._note(st, self.breaker.report(st.target, failed=True))
        return self._decide(st, error=error, call_made=not refused)

    @staticmethod
    def _note(st: CallState, fault: StoreFault | None) -> None:
        if fault is not None:
            st.notes.append(str(fault))

    def on_success(self, st: CallState, result: ToolResult) -> Verdict:
        """The verdict on a result: the built-in ``call_succeeded`` check plus the tool's validators."""
        st.result, st.error = result, None
        if isinstance(result, ToolMessage):
            content = result.content
            st.content = content if isinstance(content, str) else result.text
        else:
            st.content = None
        validators = self.validators.get(st.flow.target)
        if not validators or st.content is None:
            return self._decide(st, validators=_SUCCEEDED)
        args = dict(st.call.get("args") or {})
        checks = [_SUCCEEDED[0], *(run_check(v, st.content or "", args) for v in validators)]
        return self._decide(st, validators=checks)
