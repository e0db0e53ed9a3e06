"""The controlled step: ``act → assess → decide → {accept, refine, retry, switch, ask_user, stop}``.

A compiled LangGraph graph that answers the conversation in ``messages`` with a model of an equivalence
group. Each node only moves state between LangGraph and the controller: every decision is
:func:`~retryctl.controller.decide`'s, every route a ``Command(goto=...)``. Use it as a subgraph or as a
single node of a parent graph (``parent.add_node("solve", step.compile())``); the parent receives
``messages`` (with the accepted answer), ``result`` (a :class:`StepResult`) and ``verdicts``.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from langchain_core.language_models import BaseChatModel
from langgraph.graph import END, START, StateGraph
from langgraph.graph.state import CompiledStateGraph
from langgraph.types import Checkpointer, Command

from retryctl._turn import yielded_turn
from retryctl.audit import DecisionLog
from retryctl.controller import (
    AttemptEngine,
    Breaker,
    Budget,
    Clock,
    EquivalenceLike,
    Ledger,
    Policy,
    PriceTable,
    StepLedger,
    ValidatorResult,
    classify,
    cross_member,
    default_equivalence,
)
from retryctl.controller._breaker import counts_against
from retryctl.controller._clock import ShiftedClock, monotonic
from retryctl.controller._error_rules import ClassifyHook, RetryOn, error_classifier
from retryctl.exceptions import BreakerOpen, BreakerStoreError, ConfigError
from retryctl.models import ModelBackend
from retryctl.models._messages import Message, normalise_messages
from retryctl.nodes._arguments import DriverArguments, check_arguments, model_backends, waits
from retryctl.nodes._backoff import WaitRetryAfter
from retryctl.nodes._events import Emitter, charged_between, run_id_from_config
from retryctl.nodes._lc_runs import attempt_scope
from retryctl.nodes._observe import (
    Validator,
    best_candidate,
    classification_from,
    classification_to,
    exhaustion_from,
    exhaustion_to,
    leader_token_confidence,
    leader_weakest_span,
    run_validators,
    signal_from,
    signal_to,
    stop_from,
    stop_to,
    tally_of,
)
from retryctl.nodes._outlook import outlook
from retryctl.nodes._relax import relax, strictness_of
from retryctl.nodes._runnable import twin_node
from retryctl.nodes._sampling import (
    SampleOutcome,
    SamplingSchedule,
    run_async,
    run_sync,
    sampling,
)
from retryctl.nodes._state import (
    CandidateRecord,
    ControlState,
    StepInput,
    StepOutput,
    StepState,
    StepVerdict,
)
from retryctl.nodes._step_routes import StepRoutes
from retryctl.nodes._tokens import token_extra
from retryctl.runtime import verify
from retryctl.telemetry import Tracing

__all__ = ["ControlledStep"]

_ROUTES = ("accept", "refine", "retry", "switch", "ask_user", "stop")
Verifier = Callable[[str], float]


@dataclass
class _Attempt:
    control: ControlState
    attempt: int
    target: str
    backend: ModelBackend
    prompt: list[Message]
    ledger: StepLedger
    before: dict[str, float]
    """The step's usage when the attempt began (what it charged is the difference at its end)."""
    refused: BreakerOpen | BreakerStoreError | None
    started: float
    notes: list[str]
    """Facts about the breaker's store failing, for the verdict's evidence."""


def _with_votes(
    votes: dict[str, dict[str, int]], member: str | None, candidates: Sequence[CandidateRecord]
) -> dict[str, dict[str, int]]:
    """``votes`` with ``member``'s answers of this attempt added (repeats are not votes)."""
    if member is None:
        return votes
    mine = dict(votes.get(member, {}))
    for c in candidates:
        if c["answer"] is not None and not c.get("repeat"):
            mine[c["answer"]] = mine.get(c["answer"], 0) + 1
    return {**votes, member: mine}


class ControlledStep(StepRoutes):
    """Builds the controlled step graph for one reasoning step.

    ``models`` is the equivalence group, tried in order (``switch`` moves to the next one whose breaker
    is not open): model backends, or LangChain chat models (each wrapped in a
    :class:`~retryctl.models.LangChainBackend`, so its own temperature and ``max_tokens`` apply).
    ``budget`` limits the step; ``run_ledger`` (optional) is a run-wide ledger every draw is also
    reserved on. ``validators`` check the best candidate's text; ``verifier`` scores it in [0, 1].
    ``log`` is a :class:`~retryctl.audit.DecisionLog` or the path of one. ``sleep``/``asleep`` and
    ``clock`` are injectable so tests never wait (a ``sleep`` given alone also serves ``ainvoke``, in a
    worker thread). With ``interactive=False`` (nobody can answer: a batch job, CI) an ``ask_user``
    verdict ends the step with status ``needs_user`` instead of pausing it with ``interrupt()``.
    ``retry_on`` (exception classes or a predicate, LangChain's meaning: what does not match is never
    retried) and ``classify`` (a function of the exception returning an ``ErrorClass``, or ``None`` for
    the default) judge a failed draw (see :func:`~retryctl.controller.error_classifier`).
    ``tracer_provider``: the OpenTelemetry provider of the attempts' spans (``None``: the application's
    global one, if set; :mod:`retryctl.telemetry`): the step a span ``retryctl.step <step_id>`` in the
    span current where it runs (opened at its first verdict, ended at its terminal one), each attempt a
    child span named for its model, with its verdict as an event. Every argument
    is checked here (:mod:`retryctl.nodes._arguments`): a wrong one is a
    :class:`~retryctl.exceptions.ConfigError` naming it.
    """

    def __init__(
        self,
        models: ModelBackend | BaseChatModel | Sequence[ModelBackend | BaseChatModel],
        *,
        policy: Policy | None = None,
        schedule: SamplingSchedule | None = None,
        budget: Budget | None = None,
        run_ledger: Ledger | None = None,
        equivalence: EquivalenceLike | None = None,
        verifier: Verifier | None = None,
        validators: Sequence[Validator] = (),
        breaker: Breaker | None = None,
        log: DecisionLog | str | os.PathLike[str] | None = None,
        prices: PriceTable | None = None,
        backoff: WaitRetryAfter | None = None,
        clock: Clock = monotonic,
        sleep: Callable[[float], None] | None = None,
        asleep: Callable[[float], Awaitable[None]] | None = None,
        step_id: str = "step",
        interactive: bool = True,
        retry_on: RetryOn | None = None,
        classify: ClassifyHook | None = None,
        tracer_provider: Any = None,
    ) -> None:
        # Checked here, where the field can be named, not at the first draw deep inside a graph run.
        group = model_backends(models)
        if not isinstance(step_id, str) or not step_id:
            raise ConfigError(field="step_id", value=step_id, problem="must be a non-empty string")
        names = [m.name for m in group]
        if len(set(names)) != len(names):
            raise ConfigError(field="models", value=names, problem="model names must be unique")
        args = check_arguments(
            DriverArguments,
            policy=policy,
            budget=budget,
            run_ledger=run_ledger,
            breaker=breaker,
            prices=prices,
            backoff=backoff,
            clock=clock,
            sleep=sleep,
            asleep=asleep,
            tracer_provider=tracer_provider,
            log=log,
        )
        self.models = {m.name: m for m in group}
        self.names = names
        self.policy = policy or Policy()
        self.schedule = schedule or SamplingSchedule()
        self.budget = budget or Budget()
        self.run_ledger = run_ledger
        self.equivalence: EquivalenceLike = equivalence or default_equivalence
        self.verifier = verifier
        self.validators = list(validators)
        self.breaker = breaker
        self.prices = prices
        self.backoff = backoff or WaitRetryAfter()
        self.clock = clock
        self.sleep, self.asleep = waits(sleep, asleep)
        self.step_id = step_id
        self.interactive = interactive
        self.emitter = Emitter(args.log, tracing=Tracing(args.tracer_provider, held_steps=True))
        self.classifier = error_classifier(retry_on=retry_on, classify=classify)
        self.engine = AttemptEngine(
            policy=self.policy,
            backoff=self.backoff.for_retry,
            refine_in_place=True,  # the step re-asks its model with the feedback
            interactive=interactive,
        )

    # -- building ---------------------------------------------------------------------------------

    def graph(self) -> StateGraph[StepState, None, StepInput, StepOutput]:
        """The uncompiled graph, for callers that add nodes or compile it themselves."""
        g = StateGraph(StepState, input_schema=StepInput, output_schema=StepOutput)
        nodes: dict[str, tuple[Callable[..., Any], Callable[..., Any] | None, tuple[str, ...]]] = {
            "begin": (self._begin_step, None, ("act",)),
            "act": (self._act, self._aact, ("assess",)),
            "assess": (self._assess, self._aassess, ("decide",)),
            "decide": (self._decide, None, _ROUTES),
            "accept": (self._accept, None, (END,)),
            "refine": (self._refine, None, ("act",)),
            "retry": (self._retry, self._aretry, ("act",)),
            "switch": (self._switch, None, ("act",)),
            "ask_user": (self._ask_user, None, ("act", "stop", END)),
            "stop": (self._stop, None, (END,)),
        }
        for name, (func, afunc, goes_to) in nodes.items():
            g.add_node(name, twin_node(func, afunc, name=name), destinations=goes_to)
        g.add_edge(START, "begin")
        return g

    def compile(
        self, *, checkpointer: Checkpointer = None, name: str | None = None
    ) -> CompiledStateGraph[StepState, None, StepInput, StepOutput]:
        """The compiled graph. Leave ``checkpointer`` unset for a subgraph: it uses its parent's."""
        return self.graph().compile(checkpointer=checkpointer, name=name or self.step_id)

    # -- budget -----------------------------------------------------------------------------------

    def _ledger(self, usage: dict[str, float], extra: dict[str, float], elapsed: float) -> StepLedger:
        # The ledger is rebuilt from the state on every attempt: the state is what a checkpointer
        # keeps, so a run resumed in another process continues with the same usage and time spent.
        clock = ShiftedClock(self.clock)
        # A step of a throwaway unlimited run, so that exhaustion names the step as its scope.
        ledger = Ledger(clock=clock).step(self.step_id, budget=Budget.model_validate(self.limits(extra)))
        ledger.carry(usage)
        clock.offset = elapsed
        return ledger

    # -- begin: a new question on a thread starts with fresh bookkeeping -------------------------

    def _begin_step(self, state: StepState) -> Command[str]:
        # Runs only when the graph is invoked with input: a resume continues at the interrupted node.
        attempt, _ = self.engine.start(self.names)
        if self.emitter.tracing.active:  # a span this run left open (its graph raised) ends here
            self.emitter.tracing.restart_step(run_id=run_id_from_config(), step_id=self.step_id)
        fresh: dict[str, Any] = {
            "control": self._keep({}, attempt),
            "usage": {},
            "candidates": [],
            "result": None,
            "verdicts": None,
        }
        return Command(update=fresh, goto="act")

    # -- act ----------------------------------------------------------------------------------------

    def _prompt(self, state: StepState, control: ControlState) -> list[Message]:
        if not state.get("messages"):
            raise ConfigError(field="messages", value=[], problem="a controlled step needs a conversation")
        prompt = normalise_messages(state["messages"])
        for round_ in control.get("feedback", []):
            if round_.get("previous"):
                prompt.append({"role": "assistant", "content": round_["previous"]})
            prompt.append({"role": "user", "content": round_["feedback"]})
        return prompt

    def _begin(self, state: StepState) -> _Attempt:
        control: ControlState = {**state.get("control", {})}
        # The engine numbered this attempt and chose its target when it moved on (begin, retry,
        # switch, refine, extend): the act node only runs it.
        target = control.get("target") or self.names[0]
        prompt = self._prompt(state, control)  # before the breaker: misuse must not take a probe slot
        refused, notes = None, []
        if self.breaker is not None:
            # admit, not allow: a breaker store that is down is decided on (fail open or closed), not raised.
            admission = self.breaker.admit(target)
            refused = admission.refused
            notes = [str(admission.fault)] if admission.fault is not None else []
        return _Attempt(
            control=control,
            attempt=control.get("attempt") or 1,
            target=target,
            backend=self.models[target],
            prompt=prompt,
            ledger=self._ledger(
                state.get("usage", {}), control.get("extra_budget", {}), control.get("elapsed_s", 0.0)
            ),
            before=state.get("usage", {}),
            refused=refused,
            started=self.clock(),
            notes=notes,
        )

    def _sampling(self, att: _Attempt) -> Any:
        return sampling(
            messages=att.prompt,
            model=att.target,
            attempt=att.attempt,
            min_samples=self.policy.min_samples,
            max_samples=self.policy.max_samples,
            rule=self.policy.stopping_rule(),
            equivalence=self.equivalence,
            schedule=self.schedule,
            ledgers=[att.ledger] if self.run_ledger is None else [att.ledger, self.run_ledger],
            prices=self.prices,
            output_limit=getattr(att.backend, "output_limit", None),
            classifier=self.classifier,
            strictness=strictness_of(self.policy, att.control, att.target),
            token_log=self.policy.token_log,
        )

    def _finish(self, att: _Attempt, out: SampleOutcome) -> Command[str]:
        notes = [*att.notes, *out.notes]
        breakers: dict[str, str] = {}
        if self.breaker is not None:
            fault = None
            if att.refused is None:
                failed = out.error is not None and counts_against(out.error)
                if failed or out.candidates:
                    fault = self.breaker.report(att.target, failed=failed)
            breakers, unknown = self.breaker.snapshot()
            notes += [str(f) for f in (fault, unknown) if f is not None]
        used = att.ledger.snapshot().used
        control: ControlState = {
            **att.control,
            "attempt": att.attempt,
            "target": att.target,
            "error": classification_to(out.error),
            "exhausted": exhaustion_to(out.exhausted),
            "stop": stop_to(out.stop),
            "notes": notes,
            "latency_ms": (self.clock() - att.started) * 1000.0,
            # Refused before any draw: an open breaker, or a budget that could not pay for the first.
            "called": att.refused is None
            and not (out.exhausted is not None and not out.candidates and out.error is None),
            "charged": charged_between(att.before, used),
            "elapsed_s": used["wall_s"],
            "breakers": breakers,
        }
        return Command(
            update={"candidates": out.candidates, "usage": used, "control": control}, goto="assess"
        )

    def _act(self, state: StepState) -> Command[str]:
        att = self._begin(state)
        if att.refused is not None:
            return self._finish(att, SampleOutcome(error=classify(att.refused)))
        with attempt_scope(att.attempt, att.target):  # its LangChain runs are tagged retry:attempt:N
            out = run_sync(self._sampling(att), att.backend, att.prompt)
        return self._finish(att, out)

    async def _aact(self, state: StepState) -> Command[str]:
        att = self._begin(state)
        if att.refused is not None:
            return self._finish(att, SampleOutcome(error=classify(att.refused)))
        with attempt_scope(att.attempt, att.target):
            out = await run_async(self._sampling(att), att.backend, att.prompt)
        return self._finish(att, out)

    # -- assess -------------------------------------------------------------------------------------

    def _measure(self, state: StepState) -> tuple[ControlState, str | None, list[ValidatorResult]]:
        control: ControlState = {**state["control"]}
        candidates = state.get("candidates", [])
        stop = stop_from(control.get("stop"))
        leader = stop.leader if stop is not None else None
        best = best_candidate(candidates, leader)
        if best is not None:
            # With which draw it is, so the verdict's record names the sample an accept returns.
            index = next(i for i, c in enumerate(candidates) if c is best)
            control["best"] = {k: best[k] for k in ("answer", "text", "model", "attempt")} | {"index": index}
        control["signals"] = []
        if candidates:
            others = {
                m: v for m, v in control.get("votes_by_member", {}).items() if m != control.get("target")
            }
            control["signals"] = [
                signal_to(leader_token_confidence(candidates, leader)),
                signal_to(leader_weakest_span(candidates, leader)),
                signal_to(cross_member(best["answer"] if best else None, others)),
            ]
        results = run_validators(self.validators, best["text"]) if best and self.validators else []
        control["validators"] = [
            {"name": v.name, "passed": v.passed, "evidence": v.evidence} for v in results
        ]
        return control, (best["text"] if best else None), results

    def _with_verifier(self, control: ControlState, signal: Any) -> Command[str]:
        if signal is not None:
            control["signals"] = [*control["signals"], signal_to(signal)]
        return Command(update={"control": control}, goto="decide")

    def _assess(self, state: StepState) -> Command[str]:
        control, text, _ = self._measure(state)
        signal = verify(self.verifier, text) if self.verifier and text is not None else None
        return self._with_verifier(control, signal)

    async def _aassess(self, state: StepState) -> Command[str]:
        control, text, _ = self._measure(state)
        signal = None
        if self.verifier and text is not None:
            async with yielded_turn():
                signal = await asyncio.to_thread(verify, self.verifier, text)
        return self._with_verifier(control, signal)

    # -- decide -------------------------------------------------------------------------------------

    def _outlook(self, state: StepState, control: ControlState) -> dict[str, Any]:
        # The step's ledger as the next attempt would find it (and the run's): no retry, switch or
        # refine is given that they cannot pay for.
        extra = control.get("extra_budget", {})
        if self.run_ledger is None and all(v is None for v in self.limits(extra).values()):
            return {}
        ledgers: list[Ledger | StepLedger] = [
            self._ledger(state.get("usage", {}), extra, control.get("elapsed_s", 0.0))
        ]
        ledgers += [self.run_ledger] if self.run_ledger is not None else []
        p = self.policy
        return outlook(
            ledgers,
            self._prompt(state, control),
            self.names,
            output_limits={n: getattr(m, "output_limit", None) for n, m in self.models.items()},
            min_samples=p.min_samples,
            max_samples=p.max_samples,
            schedule=self.schedule,
            prices=self.prices,
        )

    def _decide(self, state: StepState) -> Command[str]:
        control: ControlState = {**state["control"]}
        candidates = state.get("candidates", [])
        attempt = self._attempt_state(control)
        verdict = self.engine.judge(
            attempt,
            tally=tally_of(candidates, self.policy.max_samples),
            stop=stop_from(control.get("stop")),
            signals=[signal_from(s) for s in control.get("signals", [])],
            validators=[ValidatorResult(**v) for v in control.get("validators", [])],
            error=classification_from(control.get("error")),
            budget_used=state.get("usage", {}),
            budget_limit=self.limits(control.get("extra_budget", {})),
            budget_scope="step",  # the step's own ledger (a run ledger given too is not the one logged)
            budget_charged=control.get("charged", {}),
            exhausted=exhaustion_from(control.get("exhausted")),
            breakers=control.get("breakers", {}),
            notes=control.get("notes", []),
            **self._outlook(state, control),
        )
        target = attempt.target
        relaxed = relax(
            verdict,
            policy=self.policy,
            control=control,
            member=target,
            backend=self.models[target],
            prompt=lambda: self._prompt(state, control),
            candidates=candidates,
            checks_failed=any(not v.get("passed", True) for v in control.get("validators", [])),
        )
        verdict = relaxed.verdict
        if relaxed.failures:
            control["relaxed"] = relaxed.failures
        answers = [c["answer"] for c in candidates]
        summary: dict[str, Any] = {"n": len(candidates), "answers": answers}
        best = control.get("best")
        if candidates and best and best.get("attempt") == attempt.attempt and "index" in best:
            summary["chosen"] = best["index"]  # the draw an accept returns (``result.text``)
        summary |= relaxed.summary(candidates)
        tokens = token_extra(
            candidates,
            chosen=summary.get("chosen"),
            accepted=verdict.action.value == "accept",
            token_log=self.policy.token_log,
        )
        self.emitter.verdict(
            verdict,
            step_id=self.step_id,
            attempt=attempt.attempt,
            target=target,
            candidates_summary=summary,
            latency_ms=control.get("latency_ms", 0.0),
            extra=tokens or None,
            call_made=control.get("called", True),
        )
        dumped = verdict.model_dump(mode="json")
        control["last_verdict"] = dumped
        control["votes_by_member"] = _with_votes(control.get("votes_by_member", {}), target, candidates)
        record = StepVerdict(attempt=attempt.attempt, target=target, verdict=dumped)
        return Command(update={"verdicts": [record], "control": control}, goto=verdict.action.value)
