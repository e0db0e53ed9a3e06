"""The model side of the middleware: one ``wrap_model_call`` as a flow of the attempt engine.

:meth:`ModelCalls.flow` is a generator with no I/O (the shape of httpx's auth flow): it yields the
:class:`~langchain.agents.middleware.ModelRequest` to run, or a float of seconds to sleep, and is sent
the :class:`~langchain.agents.middleware.ModelResponse` or the exception the handler raised. The sync
and async hooks (:mod:`._drive`) only do those two things. Per attempt: the run's
ledger and the model's breaker admit it, the handler runs it, its usage is charged, its answer is
checked (:mod:`._checks`) and :class:`~retryctl.controller.AttemptEngine` says what follows: ``retry``
after a backoff, ``switch`` to the next fallback model (``request.override(model=...)``), ``refine``
(the refused message and the feedback go back to the model), ``ask_user``, ``stop`` (the agent ends
with an ``AIMessage`` saying why) or ``accept``. With sampling on, an accepted final answer (no tool
calls) is drawn again until the policy's stopping rule is satisfied, and judged on agreement
(:mod:`._final`); the draw returned is one of the answer the verdict accepted, and its record names
it (``chosen``). What a call reserves on the run's ledger is :mod:`._estimate`'s.
Models are called without their clients' own retries (:mod:`retryctl.models._client_retries`): each
HTTP try is an attempt here.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Mapping
from dataclasses import dataclass
from typing import Any

from langchain.agents.middleware.types import ModelRequest, ModelResponse
from langchain.agents.structured_output import StructuredOutputValidationError
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, AnyMessage
from langchain_core.tools import BaseTool
from pydantic import ValidationError

from retryctl.controller import (
    Act,
    Action,
    Ask,
    AttemptEngine,
    AttemptState,
    Breaker,
    Clock,
    EquivalenceLike,
    Exhaustion,
    Extend,
    Finish,
    PriceTable,
    Request,
    Reservation,
    Sleep,
    Usage,
    ValidatorResult,
    Verdict,
    as_equivalence,
    classify,
)
from retryctl.controller._breaker import counts_against
from retryctl.controller._error_rules import Classifier
from retryctl.middleware._checks import check_response, field_errors, refine_messages
from retryctl.middleware._estimate import actual_usage, estimates, model_key, reserve
from retryctl.middleware._final import is_final, response_text, sample_final
from retryctl.middleware._runs import Run
from retryctl.models._client_retries import without_client_retries
from retryctl.nodes._events import Emitter, charged_between
from retryctl.nodes._interrupt import ask, ask_payload, reply_extra
from retryctl.nodes._lc_runs import attempt_scope

__all__ = ["Flow", "ModelCalls"]

Flow = Generator[ModelRequest[Any] | float, ModelResponse[Any] | BaseException | None, ModelResponse[Any]]


@dataclass
class _Tried:
    """One attempt's outcome, as the flow judges it."""

    verdict: Verdict
    response: ModelResponse[Any] | None = None
    error: BaseException | None = None
    """The exception the call raised, if it did."""


class ModelCalls:
    """The settings every model call of the agent shares (see the module docstring)."""

    def __init__(
        self,
        *,
        fallbacks: Mapping[str, BaseChatModel],
        engine: AttemptEngine,
        extra_tools: Mapping[str, BaseTool],
        breaker: Breaker | None,
        breaker_alone: bool = True,
        emitter: Emitter,
        prices: PriceTable | None,
        clock: Clock,
        sample_final: bool,
        equivalence: EquivalenceLike | None,
        on_failure: str = "continue",
        classifier: Classifier = classify,
    ) -> None:
        self.fallbacks = fallbacks
        self._called = {key: without_client_retries(model) for key, model in fallbacks.items()}
        """The fallbacks as they are called: without their clients' own retries
        (``retryctl.models._client_retries``)."""
        self.engine = engine
        self.extra_tools = extra_tools
        self.breaker = breaker
        self.breaker_alone = breaker_alone
        """Whether ``breaker`` guards a model with no fallback (else it only routes among members)."""
        self.emitter = emitter
        self.prices = prices
        self.clock = clock
        self.sample_final = sample_final
        self.equivalence = as_equivalence(equivalence)
        self.on_failure = on_failure
        self.classifier = classifier
        self._last_group: tuple[BaseChatModel, dict[str, BaseChatModel]] | None = None
        """The members of the last model group built (read-only once built; see :meth:`_group`)."""

    # -- the flow ---------------------------------------------------------------------------------

    def flow(self, request: ModelRequest[Any], run: Run, structured: frozenset[str]) -> Flow:
        """The attempts of one model call (see the module docstring)."""
        models = self._group(request.model)
        # A breaker that only routes has nothing to route to alone: the call goes on as the policy
        # says (retries, then a stop), as it would without one.
        breaker = self.breaker if self.breaker_alone or len(models) > 1 else None
        step_id = model_step_id(request)
        state, first = self.engine.start(list(models))
        next_: Request = first
        rounds: list[AnyMessage] = []  # the refine rounds so far, sent after the request's messages
        best: ModelResponse[Any] | None = None
        error: BaseException | None = None
        while True:
            if isinstance(next_, Sleep):
                yield next_.seconds
                next_ = next_.then
            elif isinstance(next_, Extend):
                run.ledger.extend(Usage.model_validate(dict(next_.amounts)))
                next_ = next_.then
            elif isinstance(next_, Ask):
                asked = next_.verdict
                next_, state = self._ask(state, asked, step_id, best)
                if isinstance(next_, Extend) and asked.feedback is not None and best is not None:
                    # The refine the budget held back, now that it is extended.
                    rounds.extend(refine_messages(best.result, asked.feedback))
            elif isinstance(next_, Finish):
                if error is not None and next_.status == "stopped" and self.on_failure == "error":
                    raise error  # the last failure, as ModelRetryMiddleware(on_failure="error") does
                return self._finish(next_, best, error)
            else:
                model = models[next_.target]
                call = (
                    request  # the first try on the agent's own model: nothing to override
                    if model is request.model and not rounds
                    else request.override(model=model, messages=[*request.messages, *rounds])
                )
                tried = yield from self._attempt(
                    state,
                    next_,
                    call,
                    run=run,
                    step_id=step_id,
                    structured=structured,
                    breaker=breaker,
                    models=models,
                )
                if tried.response is not None:
                    best = tried.response
                error = tried.error
                state, next_ = self.engine.after(state, tried.verdict, wall_left_s=_wall_left(run))
                if tried.verdict.action is Action.REFINE and tried.response is not None:
                    feedback = tried.verdict.feedback or tried.verdict.reason
                    rounds.extend(refine_messages(tried.response.result, feedback))

    def _group(self, primary: BaseChatModel) -> dict[str, BaseChatModel]:
        last = self._last_group  # one tuple, read and written whole: safe across threads
        if last is not None and last[0] is primary:
            return last[1]  # the agent's model, call after call: its key is read once (getattr
            # of a missing field on a pydantic model raises inside, which is slow)
        models = {model_key(primary): without_client_retries(primary)}
        for key, model in self.fallbacks.items():
            if model is primary:
                continue
            name, n = key, 2
            while name in models:  # two models of one name (two fakes) stay two members
                name, n = f"{key}#{n}", n + 1
            models[name] = self._called[key]
        self._last_group = (primary, models)
        return models

    def _attempt(
        self,
        state: AttemptState,
        act: Act,
        call: ModelRequest[Any],
        *,
        run: Run,
        step_id: str,
        structured: frozenset[str],
        breaker: Breaker | None,
        models: Mapping[str, BaseChatModel],
    ) -> Generator[ModelRequest[Any] | float, ModelResponse[Any] | BaseException | None, _Tried]:
        started = self.clock()
        notes: list[str] = []
        before = run.ledger.snapshot().used  # what this attempt charges is the difference at its verdict

        def judge(**outcome: Any) -> Verdict:
            return self._judge(
                state,
                act,
                call,
                run=run,
                step_id=step_id,
                started=started,
                notes=notes,
                breaker=breaker,
                before=before,
                models=models,
                **outcome,
            )

        # The attempt's span is current while the model is called (the drive calls it between this
        # generator's yields, in the same context), so the model's own spans nest in it; its verdict
        # is written on it.
        with self.emitter.tracing.attempt(act.target, act.attempt):
            if breaker is not None:
                admission = breaker.admit(act.target)
                if admission.fault is not None:
                    notes.append(str(admission.fault))
                if admission.refused is not None:
                    return _Tried(judge(error=classify(admission.refused), call_made=False))
            held = self._reserve(run, call, act.target)
            if isinstance(held, Exhaustion):
                return _Tried(judge(exhausted=held, call_made=False))
            run.count("model")
            with attempt_scope(act.attempt, act.target):  # the call's run is tagged retry:attempt:N
                outcome = yield call
            if isinstance(outcome, BaseException):
                held.commit(Usage(attempts=1, samples=1))  # a call that failed still cost an attempt
                return self._failed(outcome, act.target, notes, judge, breaker)
            assert outcome is not None
            held.commit(actual_usage(outcome.result, act.target, self.prices))
            if breaker is not None:
                fault = breaker.report(act.target, failed=False)
                if fault is not None:
                    notes.append(str(fault))
            tools = {t.name: t for t in call.tools if isinstance(t, BaseTool)} | dict(self.extra_tools)
            checks = check_response(outcome.result, tools, skip=structured)
            if self.sample_final and is_final(outcome) and all(c.passed for c in checks):
                # One verdict for the answer, on its samples' agreement (a final answer has no checks
                # but "it answered"); what is returned is a draw of the answer the verdict names.
                verdict, chosen = yield from sample_final(
                    call,
                    run,
                    outcome,
                    judge=judge,
                    act=act,
                    policy=self.engine.policy,
                    equivalence=self.equivalence,
                    reserve=self._reserve,
                    prices=self.prices,
                )
                return _Tried(verdict, chosen)
            return _Tried(judge(validators=checks), outcome)

    def _failed(
        self,
        exc: BaseException,
        target: str,
        notes: list[str],
        judge: Callable[..., Verdict],
        breaker: Breaker | None,
    ) -> _Tried:
        if isinstance(exc, StructuredOutputValidationError):
            # The answer came but did not parse: a refine naming the field, not an error of the model
            # (for its breaker, the model answered: a half-open probe that did closes it).
            fault = breaker.report(target, failed=False) if breaker is not None else None
            if fault is not None:
                notes.append(str(fault))
            invalid = _validation_error(exc.source)
            evidence = field_errors(invalid) if invalid is not None else str(exc.source)
            check = ValidatorResult(f"structured_output:{exc.tool_name}", False, evidence)
            return _Tried(judge(validators=[check]), ModelResponse(result=[exc.ai_message]))
        error = self.classifier(exc)
        if breaker is not None and counts_against(error, exc):
            fault = breaker.report(target, failed=True)
            if fault is not None:
                notes.append(str(fault))
        return _Tried(judge(error=error), error=exc)

    def _reserve(self, run: Run, call: ModelRequest[Any], key: str) -> Reservation | Exhaustion:
        return reserve(
            run.ledger,
            messages=call.messages,
            tools=call.tools,
            key=key,
            model=call.model,
            prices=self.prices,
        )

    def _judge(
        self,
        state: AttemptState,
        act: Act,
        call: ModelRequest[Any],
        *,
        run: Run,
        step_id: str,
        started: float,
        notes: list[str],
        breaker: Breaker | None,
        summary: Mapping[str, Any] | None = None,
        before: dict[str, float],
        models: Mapping[str, BaseChatModel],
        call_made: bool = True,
        **outcome: Any,
    ) -> Verdict:
        snapshot = run.ledger.snapshot()
        breakers: dict[str, str] = {}
        if breaker is not None:
            breakers, unknown = breaker.snapshot()
            if unknown is not None:
                notes.append(str(unknown))
        # A retry, switch or refine is given only if the run can pay for it: its attempt (enough
        # when only attempts or wall time are limited), else the next call's estimate on each member.
        limits = run.ledger.budget
        priced = any(getattr(limits, n) is not None for n in _ESTIMATED)
        verdict = self.engine.judge(
            state,
            budget_used=snapshot.used,
            budget_limit=snapshot.limit,
            # The run's ledger, shared with its other model and tool calls: the record says so, and
            # what this attempt charged (the flow runs alone in its run meanwhile: an agent calls its
            # model only after its tools are done), so that an audit counts each call's spend once.
            budget_scope="run",
            budget_charged=charged_between(before, snapshot.used),
            ledgers=(snapshot,),
            next_cost=estimates(
                run.ledger, messages=call.messages, tools=call.tools, models=models, prices=self.prices
            )
            if priced
            else {},
            breakers=breakers,
            notes=list(notes),
            **outcome,
        )
        notes.clear()
        self.emitter.verdict(
            verdict,
            step_id=step_id,
            attempt=act.attempt,
            target=act.target,
            candidates_summary={"model": act.target, "messages": len(call.messages), **(summary or {})},
            latency_ms=(self.clock() - started) * 1000.0,
            call_made=call_made,
        )
        return verdict

    # -- asking and finishing --------------------------------------------------------------------

    def _ask(
        self, state: AttemptState, verdict: Verdict, step_id: str, best: ModelResponse[Any] | None
    ) -> tuple[Any, AttemptState]:
        text = response_text(best) if best is not None else None
        payload = ask_payload(
            verdict,
            step_id=step_id,
            question="The model's answer",
            best=None if text is None else {"answer": text, "text": text, "model": state.target},
        )
        reply = ask(payload)
        self.emitter.reply(step_id=step_id, reply=reply.model_dump(mode="json"))
        state, decided, next_ = self.engine.reply(state, verdict, reply)
        self.emitter.verdict(
            decided,
            step_id=step_id,
            attempt=state.attempt,
            target="user" if reply.action == "answer" else state.target,
            candidates_summary={"model": state.target},
            latency_ms=0.0,
            extra=reply_extra(reply),
            call_made=False,  # a person's reply decided: nothing was called
        )
        return next_, state

    @staticmethod
    def _finish(
        finish: Finish, best: ModelResponse[Any] | None, error: BaseException | None
    ) -> ModelResponse[Any]:
        verdict = finish.verdict
        if finish.status == "accepted" and best is not None:
            return best
        if finish.status == "answered_by_user" and verdict.answer is not None:
            answer = AIMessage(content=verdict.answer, response_metadata={"retryctl": _info(verdict)})
            return ModelResponse(result=[answer])
        text = f"retryctl stopped the agent: {verdict.reason}"
        if error is not None:
            text += f" (last error: {type(error).__name__}: {error})"
        return ModelResponse(result=[AIMessage(content=text, response_metadata={"retryctl": _info(verdict)})])


_ESTIMATED = ("samples", "input_tokens", "output_tokens", "usd")
"""The limits a call's estimate is needed for (one attempt is what every call costs anyway)."""


def model_step_id(request: ModelRequest[Any]) -> str:
    """The ``step_id`` of a model call's records: ``model:N``, the agent's N-th answer of the run."""
    return f"model:{sum(isinstance(m, AIMessage) for m in request.messages) + 1}"


def _wall_left(run: Run) -> float | None:
    """The wall time the run has left (``None``: no wall limit, so the ledger need not be read)."""
    return None if run.ledger.budget.wall_s is None else run.ledger.remaining().wall_s


def _validation_error(exc: BaseException | None) -> ValidationError | None:
    """The pydantic error inside ``exc`` (LangChain wraps it in a ``ValueError``), if there is one."""
    seen = 0
    while exc is not None and seen < 8:
        if isinstance(exc, ValidationError):
            return exc
        exc, seen = exc.__cause__ or exc.__context__, seen + 1
    return None


def _info(verdict: Verdict) -> dict[str, Any]:
    return {"action": verdict.action.value, "reason": verdict.reason, "confidence": verdict.confidence}
