"""An adaptive request, decided: the attempt engine driven over one backend (no LangGraph here).

Per attempt the backend's breaker admits it, the sampling loop draws ``min_samples`` and then more until
the request's stopping rule is satisfied or ``max_samples`` is reached (:mod:`retryctl.nodes._sampling`,
the loop the controlled step runs), every draw reserved on the request's ledger first; the engine judges
the tally with the leader's token confidence and says what follows: ``accept``; ``retry`` after a backoff
(a transient upstream fault); or ``stop`` (budget spent, breaker open, a terminal fault, or a confidence
below the threshold: the gateway has no one to ask and nothing to switch to, so the caller gets the
leading answer with its confidence and decides). Each verdict is written to the decision log, and the
request ends with a summary record.

The response and the log count alike (:meth:`Decided.block`): an *attempt* is one verdict (one record,
``attempt`` N); a *call* is one request to the backend (the budget's ``attempts`` quantity: an attempt
draws its samples in one call or several); a *sample* is one candidate drawn, a *vote* one that counts
in the stopping rule (a sample cut short, or repeating an earlier one, is drawn and paid for but is no
vote). The summary's ``final_answer`` is the answer the response carried, accepted or not: the verdict
says which.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Generator, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import orjson

from retryctl.audit import DecisionLog
from retryctl.controller import (
    AttemptEngine,
    Breaker,
    Clock,
    Finish,
    Ledger,
    Request,
    Sleep,
    TokenLog,
    Verdict,
    classify,
)
from retryctl.controller._breaker import counts_against
from retryctl.evals._choice import CalibrationChoice
from retryctl.gateway._faults import request_own
from retryctl.gateway._request import AdaptiveOptions
from retryctl.models import Candidate, ModelBackend, RepeatedFault, SamplingParams
from retryctl.models._messages import Message
from retryctl.models._retry import RetrySettings
from retryctl.nodes._events import charged_between
from retryctl.nodes._observe import best_candidate, leader_token_confidence, tally_of
from retryctl.nodes._outlook import outlook
from retryctl.nodes._sampling import DrawRequest, SampleOutcome, SamplingSchedule, run_async, sampling
from retryctl.nodes._state import CandidateRecord
from retryctl.nodes._tokens import token_extra
from retryctl.telemetry import NO_TRACING, Tracing

__all__ = ["Decided", "OwnFaults", "decide_request"]

STEP_ID = "chat.completions"
"""The ``step_id`` of a gateway request's records in the decision log."""


@dataclass
class Decided:
    """How an adaptive request ended."""

    verdict: Verdict
    """The last verdict (``accept``, or ``stop`` and why)."""
    candidates: list[CandidateRecord]
    """The samples of the last attempt, in the order drawn."""
    chosen: CandidateRecord | None
    """The first sample of the leading answer (``None``: nothing was drawn)."""
    chosen_candidate: Candidate | None
    """That sample as the backend returned it (its finish reason, logprobs and usage)."""
    stopping_reason: str
    """Why sampling ended (the stopping rule's reason, or what ended the request before it)."""
    max_samples: int
    samples_used: int
    """Samples drawn over every attempt (cut short and repeated ones included: all were paid for)."""
    calls: int
    """Calls to the backend over every attempt (the ledger's ``attempts``)."""
    history: list[dict[str, Any]]
    """Per attempt, as the summary record's ``sampling_history`` has it: ``attempt``, ``action``,
    ``samples``, ``votes``, ``answers``."""
    input_tokens: int
    output_tokens: int
    """Tokens the upstream reported for every draw (the ``usage`` of the response)."""
    error: BaseException | None = None
    """The upstream's last fault, when the request ended on one."""
    attempts: int = 1
    notes: list[str] = field(default_factory=list)
    calibration: str | None = None
    """The label of the calibration the verdicts applied (``shipped``, ``none``, ``uncalibrated``, a
    file), as the records say."""

    def block(self, run_id: str) -> dict[str, Any]:
        """The response's ``retryctl`` block: what the decision log's records of ``run_id`` say."""
        verdict = self.verdict
        return {
            "confidence": verdict.confidence,
            "verdict": verdict.action.value,
            "reason": verdict.reason,
            "answer": None if self.chosen is None else self.chosen["answer"],
            "samples_used": self.samples_used,
            "max_samples": self.max_samples,
            "stopping_reason": self.stopping_reason,
            "candidates": self.candidate_summary(),
            "attempts": self.attempts,
            "calls": self.calls,
            "history": [{k: v for k, v in h.items() if k != "answers"} for h in self.history],
            "run_id": run_id,
            "calibration": self.calibration,
        }

    def candidate_summary(self) -> list[dict[str, Any]]:
        """Each distinct answer with its votes and its share of the last attempt's samples."""
        counts = Counter(c["answer"] for c in self.candidates)
        total = max(1, len(self.candidates))
        return [
            {"answer": answer, "count": count, "confidence": round(count / total, 6)}
            for answer, count in counts.most_common()
        ]


class OwnFaults(Protocol):
    """Where a 500 a request met twice word for word is judged (:class:`~retryctl.gateway._faults.
    RequestFaults` behind the upstream, shared with proxied requests)."""

    async def judged(self, content: bytes, fault: RepeatedFault) -> bool | None:
        """``True`` when it counts against the breaker (the upstream fails everything alike), ``None``
        when it is the request's own."""
        ...

    def succeeded(self) -> None:
        """A draw succeeded: the upstream is healthy."""
        ...


@dataclass(frozen=True)
class _Attempt:
    outcome: SampleOutcome
    error: BaseException | None
    drawn: list[Candidate] = field(default_factory=list)
    """The candidates as the backend returned them, in the order drawn (one per outcome record)."""
    called: bool = True
    """``False`` when the breaker refused the call: nothing was asked of the upstream."""

    def candidate(self, record: CandidateRecord | None) -> Candidate | None:
        """The drawn candidate behind ``record`` (the loop records every draw, in order)."""
        if record is None or len(self.drawn) != len(self.outcome.candidates):
            return None
        index = next(i for i, c in enumerate(self.outcome.candidates) if c is record)
        return self.drawn[index]


async def decide_request(
    *,
    backend: ModelBackend,
    messages: Sequence[Message],
    params: SamplingParams,
    options: AdaptiveOptions,
    run_id: str,
    retry: RetrySettings,
    clock: Clock,
    breaker: Breaker | None = None,
    log: DecisionLog | None = None,
    calibration: CalibrationChoice | None = None,
    faults: OwnFaults | None = None,
    tracing: Tracing = NO_TRACING,
    token_log: TokenLog | None = None,
) -> Decided:
    """Sample ``messages`` adaptively under ``options`` until the engine finishes (see the module doc);
    ``calibration`` maps the confidence before the threshold, and its label goes in every record;
    ``faults`` judges a 500 the upstream repeated word for word (without it: the request's own);
    ``tracing``: each attempt a span (in the request's span, when the caller opened one), each verdict
    an event on it; ``token_log``: the per-token data its records carry (``None``: the default)."""
    policy = options.controller_policy(
        calibration.calibration if calibration is not None else None, token_log=token_log
    )
    extra = {"calibration": calibration.label} if calibration is not None else None
    engine = AttemptEngine(
        policy=policy,
        backoff=lambda n, after: retry.backoff(n, None) if after is None else after,
        refine_in_place=False,
        interactive=False,
    )
    ledger = Ledger(budget=options.budget, clock=clock)
    schedule = SamplingSchedule(
        temperatures=(params.temperature,),
        top_p=params.top_p,
        seed=params.seed,
        max_tokens=params.max_tokens,
    )
    target = backend.name
    state, first = engine.start([target])
    request: Request = first
    samples = 0
    tokens = [0, 0]  # input, output: what the upstream reported for every draw
    history: list[dict[str, Any]] = []
    while True:
        if isinstance(request, Sleep):
            await asyncio.sleep(request.seconds)
            request = request.then
        if isinstance(request, Finish):
            break
        loop = sampling(
            messages=messages,
            model=target,
            attempt=state.attempt,
            min_samples=policy.min_samples,
            max_samples=policy.max_samples,
            rule=policy.stopping_rule(),
            equivalence=options.equivalence,
            schedule=schedule,
            ledgers=[ledger],
            token_log=policy.token_log,
        )
        began = clock()
        before = ledger.snapshot().used
        with tracing.attempt(target, state.attempt):
            tried = await _attempt(backend, messages, loop, breaker, tokens, faults=faults)
            latency_ms = (clock() - began) * 1000.0
            out = tried.outcome
            leader = out.stop.leader if out.stop is not None else None
            samples += len(out.candidates)
            breakers = breaker.snapshot()[0] if breaker is not None else {}
            snapshot = ledger.snapshot()
            verdict = engine.judge(
                state,
                tally=tally_of(out.candidates, policy.max_samples),
                stop=out.stop,
                signals=[leader_token_confidence(out.candidates, leader)] if out.candidates else [],
                error=out.error,
                budget_used=snapshot.used,
                budget_limit=snapshot.limit,
                budget_scope="step",  # the request's own ledger: one step
                budget_charged=charged_between(before, snapshot.used),
                exhausted=out.exhausted,
                breakers=breakers,
                notes=out.notes,
                # No retry or refine the request's budget cannot pay for (nor its backoff's wait).
                **outlook(
                    [ledger],
                    messages,
                    [target],
                    min_samples=policy.min_samples,
                    max_samples=policy.max_samples,
                    schedule=schedule,
                    prices=None,
                ),
            )
            answers = [c["answer"] for c in out.candidates]
            votes = sum(1 for c in out.candidates if not c.get("cut") and not c.get("repeat"))
            history.append(
                {
                    "attempt": state.attempt,
                    "action": verdict.action.value,
                    "samples": len(answers),
                    "votes": votes,
                    "answers": answers,
                }
            )
            record: dict[str, Any] = {}
            if log is not None:
                summary: dict[str, Any] = {"n": len(answers), "answers": answers}
                chosen = best_candidate(out.candidates, leader)
                if chosen is not None:  # the draw the response carries, should this verdict end it
                    summary["chosen"] = next(i for i, c in enumerate(out.candidates) if c is chosen)
                per_token = token_extra(
                    out.candidates,
                    chosen=summary.get("chosen"),
                    accepted=verdict.action.value == "accept",
                    token_log=policy.token_log,
                )
                record = log.record_verdict(
                    verdict,
                    run_id=run_id,
                    step_id=STEP_ID,
                    attempt=state.attempt,
                    target=target,
                    candidates_summary=summary,
                    latency_ms=latency_ms,
                    extra={**(extra or {}), **per_token} or None,
                )
            tracing.verdict(
                verdict,
                attempt=state.attempt,
                target=target,
                step_id=STEP_ID,
                run_id=run_id,
                latency_ms=latency_ms,
                record_hash=record.get("hash"),
                # Refused before any draw: the breaker, or a budget that could not pay for the first.
                call_made=tried.called
                and not (out.exhausted is not None and not out.candidates and out.error is None),
            )
        state, request = engine.after(state, verdict, wall_left_s=ledger.remaining().wall_s)
    used = ledger.snapshot().used
    chosen = best_candidate(out.candidates, leader)
    decided = Decided(
        verdict=verdict,
        candidates=out.candidates,
        chosen=chosen,
        chosen_candidate=tried.candidate(chosen),
        stopping_reason=_stopping_reason(out, verdict, history),
        max_samples=policy.max_samples,
        samples_used=samples,
        calls=int(used.get("attempts", 0)),
        history=history,
        input_tokens=tokens[0],
        output_tokens=tokens[1],
        error=tried.error,
        attempts=state.attempt,
        notes=list(out.notes),
        calibration=calibration.label if calibration is not None else None,
    )
    if log is not None:
        log.record_summary(
            run_id=run_id,
            step_id=STEP_ID,
            # What the response carried, accepted or not (the last verdict says which).
            final_answer=chosen["answer"] if chosen is not None else None,
            sampling_history=history,
            budget_used=dict(used),
            budget_max={k: v for k, v in options.budget.model_dump().items()},
            extra=extra,
        )
    return decided


async def _attempt(
    backend: ModelBackend,
    messages: Sequence[Message],
    loop: Generator[DrawRequest, list[Candidate], SampleOutcome],
    breaker: Breaker | None,
    used: list[int],
    *,
    faults: OwnFaults | None = None,
) -> _Attempt:
    """One attempt: the breaker's admission, the sampling ``loop`` driven, the outcome reported."""
    target = backend.name
    if breaker is not None:
        admission = breaker.admit(target)
        if admission.refused is not None:
            loop.close()
            return _Attempt(SampleOutcome(error=classify(admission.refused)), admission.refused, called=False)
    watched = _Watched(backend, used)
    out = await run_async(loop, watched, messages)
    if breaker is not None:
        # A refusal of the request (an upstream 4xx), or a 500 it met twice word for word, is its own,
        # never the upstream's health (unless the upstream answers everything alike).
        own = request_own(watched.error)
        if faults is not None and isinstance(watched.error, RepeatedFault) and out.error is not None:
            content = orjson.dumps(list(messages), default=str)
            own = await faults.judged(content, watched.error) is None
        elif faults is not None and out.candidates:
            faults.succeeded()
        failed = out.error is not None and counts_against(out.error) and not own
        if failed or out.candidates:
            breaker.report(target, failed=failed)
        elif admission.probe:
            breaker.release(target)  # the probe said nothing: the next request probes
    return _Attempt(out, watched.error if out.error is not None else None, watched.drawn)


class _Watched:
    """The backend, keeping the last exception a draw raised (the response maps it to a status) and
    the tokens its draws really used (the ledger charges at most a draw's reservation, an estimate)."""

    def __init__(self, backend: ModelBackend, used: list[int]) -> None:
        self._backend = backend
        self.error: BaseException | None = None
        self.used = used
        self.drawn: list[Candidate] = []

    @property
    def name(self) -> str:
        return self._backend.name

    async def sample(
        self, messages: Any, params: SamplingParams | None = None, *, k: int = 1
    ) -> list[Candidate]:
        try:
            drawn: list[Candidate] = await self._backend.sample(messages, params, k=k)
        except Exception as exc:
            self.error = exc
            raise
        self.used[0] += sum(c.usage.input_tokens for c in drawn)
        self.used[1] += sum(c.usage.output_tokens for c in drawn)
        self.drawn += drawn
        return drawn


def _stopping_reason(out: SampleOutcome, verdict: Verdict, history: list[dict[str, Any]]) -> str:
    """Why the last attempt's sampling ended, saying which attempt, and its samples beside its votes
    where they differ (the rule counts votes; ``samples_used`` counts every sample of every attempt)."""
    if out.stop is not None:
        reason = out.stop.reason
    elif out.exhausted is not None:
        reason = str(out.exhausted)
    elif out.error is not None:
        reason = out.error.reason
    else:
        reason = verdict.reason
    last = history[-1] if history else None
    if last is None:
        return reason
    if last["samples"] != last["votes"]:
        cut = sum(1 for c in out.candidates if c.get("cut"))
        repeats = sum(1 for c in out.candidates if c.get("repeat"))
        reason += (
            f" ({last['samples']} samples drawn, {last['votes']} of them votes: "
            f"{cut} cut short, {repeats} repeats)"
        )
    if len(history) > 1:
        reason = f"attempt {last['attempt']}: {reason}"
    return reason
