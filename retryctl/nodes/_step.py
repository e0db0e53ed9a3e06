"""The controlled step: ``act → assess → decide → {accept, refine, retry, switch, ask_user, stop}``.

A compiled LangGraph graph that answers the conversation in ``messages`` with a model of an equivalence
group. Each node only moves state between LangGraph and the controller: every decision is
:func:`~retryctl.controller.decide`'s, every route a ``Command(goto=...)``. Use it as a subgraph or as a
single node of a parent graph (``parent.add_node("solve", step.compile())``); the parent receives
``messages`` (with the accepted answer), ``result`` (a :class:`StepResult`) and ``verdicts``.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

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
from retryctl.exceptions import BreakerOpen, BreakerStoreError, ConfigError
from retryctl.models import ModelBackend
from retryctl.models._messages import Message, normalise_messages
from retryctl.nodes._backoff import WaitRetryAfter
from retryctl.nodes._events import Emitter
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
from retryctl.runtime import verify

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
    is not open). ``budget`` limits the step; ``run_ledger`` (optional) is a run-wide ledger every draw
    is also reserved on. ``validators`` check the best candidate's text; ``verifier`` scores it in
    [0, 1]. ``sleep``/``asleep`` and ``clock`` are injectable so tests never wait. With
    ``interactive=False`` (nobody can answer: a batch job, CI) an ``ask_user`` verdict ends the step with
    status ``needs_user`` instead of pausing it with ``interrupt()``.
    """

    def __init__(
        self,
        models: ModelBackend | Sequence[ModelBackend],
        *,
        policy: Policy | None = None,
        schedule: SamplingSchedule | None = None,
        budget: Budget | None = None,
        run_ledger: Ledger | None = None,
        equivalence: EquivalenceLike | None = None,
        verifier: Verifier | None = None,
        validators: Sequence[Validator] = (),
        breaker: Breaker | None = None,
        log: DecisionLog | None = None,
        prices: PriceTable | None = None,
        backoff: WaitRetryAfter | None = None,
        clock: Clock = monotonic,
        sleep: Callable[[float], None] = time.sleep,
        asleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        step_id: str = "step",
        interactive: bool = True,
    ) -> None:
        # A str is iterable too: take it whole, so the error names "gpt", not its first letter.
        group = [models] if isinstance(models, ModelBackend | str) else list(models)
        if not group:
            raise ConfigError(field="models", value=models, problem="needs at least one model backend")
        # Checked here, where the field can be named, not at the first draw deep inside a graph run.
        for i, member in enumerate(group):
            if not isinstance(member, ModelBackend):
                raise ConfigError(field=f"models[{i}]", value=member, problem="not a model backend")
        for name, value, kind in (("policy", policy, Policy), ("budget", budget, Budget)):
            if value is not None and not isinstance(value, kind):
                want = kind.__name__
                problem = f"must be a {want} (e.g. {want}(**the_dict)), not {type(value).__name__}"
                raise ConfigError(field=name, value=value, problem=problem)
        if not isinstance(step_id, str) or not step_id:
            raise ConfigError(field="step_id", value=step_id, problem="must be a non-empty string")
        names = [m.name for m in group]
        if len(set(names)) != len(names):
            raise ConfigError(field="models", value=names, problem="model names must be unique")
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
        self.sleep = sleep
        self.asleep = asleep
        self.step_id = step_id
        self.interactive = interactive
        self.emitter = Emitter(log)
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
        return self._finish(att, run_sync(self._sampling(att), att.backend, att.prompt))

    async def _aact(self, state: StepState) -> Command[str]:
        att = self._begin(state)
        if att.refused is not None:
            return self._finish(att, SampleOutcome(error=classify(att.refused)))
        return self._finish(att, await run_async(self._sampling(att), att.backend, att.prompt))

    # -- assess -------------------------------------------------------------------------------------

    def _measure(self, state: StepState) -> tuple[ControlState, str | None, list[ValidatorResult]]:
        control: ControlState = {**state["control"]}
        candidates = state.get("candidates", [])
        stop = stop_from(control.get("stop"))
        leader = stop.leader if stop is not None else None
        best = best_candidate(candidates, leader)
        if best is not None:
            control["best"] = {k: best[k] for k in ("answer", "text", "model", "attempt")}
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
            exhausted=exhaustion_from(control.get("exhausted")),
            breakers=control.get("breakers", {}),
            notes=control.get("notes", []),
            **self._outlook(state, control),
        )
        target = attempt.target
        answers = [c["answer"] for c in candidates]
        self.emitter.verdict(
            verdict,
            step_id=self.step_id,
            attempt=attempt.attempt,
            target=target,
            candidates_summary={"n": len(candidates), "answers": answers},
            latency_ms=control.get("latency_ms", 0.0),
        )
        dumped = verdict.model_dump(mode="json")
        control["last_verdict"] = dumped
        control["votes_by_member"] = _with_votes(control.get("votes_by_member", {}), target, candidates)
        record = StepVerdict(attempt=attempt.attempt, target=target, verdict=dumped)
        return Command(update={"verdicts": [record], "control": control}, goto=verdict.action.value)
