"""Adaptive sampling for a reasoning step: draw ``min_samples``, ask the stopping rule, draw more until it
stops or ``max_samples`` is reached, reserving budget before every draw and committing it after.

The loop is one generator with no I/O (as httpx drives auth flows): it yields a :class:`DrawRequest`
and receives the candidates, or the exception the backend raised. :func:`run_sync` and :func:`run_async`
only perform the draws, so the sync and async steps share every decision.

A draw takes every sample the stopping rule is sure to need before it could stop
(:func:`~retryctl.controller.stopping.fewest_more`; at least ``min_samples`` first and
``SamplingSchedule.batch`` after). A rule that stops soonest when the samples agree is asked after
the draw the same questions it would have been asked after each sample, so the samples drawn (their
seeds are their indices) and the stop are those of drawing one at a time, and a server that takes
``n`` or parallel calls returns them in one wait. The default rule with ``max_samples`` 8 cannot stop
before 3 agreeing samples: the gateway's ``bench/gateway_throughput.py`` draws those in one call.
Under a wall-time limit draws are not batched (see :func:`sampling`).

A backend's own transport retries (an HTTP 503 sent again inside one draw) are budgeted here too: each
request carries a listener (:attr:`DrawRequest.on_retry`) that the drivers install around the draw
(:func:`~retryctl.models._retry.transport_retries`); it charges ``transport_retries`` on every ledger,
refuses the retry when a limit is reached, and the attempt's outcome lists every retry
(:attr:`SampleOutcome.transport`, and one note each for the verdict's evidence).

In a batch, :func:`run_async` gives the task's turn up around each draw
(:func:`~retryctl._turn.yielded_turn`): the driver's await, not the backend's, so that models know
nothing of batches.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field, replace

from retryctl._turn import yielded_turn
from retryctl.controller import (
    Classification,
    EquivalenceLike,
    Exhaustion,
    Ledger,
    PriceTable,
    Repeats,
    Reservation,
    StepLedger,
    StopDecision,
    StopRule,
    Tally,
    TokenLog,
    classify,
    token_confidence,
    weakest_span,
)
from retryctl.controller import Usage as BudgetUsage
from retryctl.controller._error_rules import Classifier
from retryctl.controller.stopping import fewest_more, group_floor
from retryctl.models import Candidate, ModelBackend, SamplingParams, sample_blocking
from retryctl.models._base import sample_within
from retryctl.models._messages import Message
from retryctl.models._prompt_bound import PER_MESSAGE_TOKENS, TEMPLATE_TOKENS, prompt_tokens_bound
from retryctl.models._retry import RetryListener, TransportRetry, transport_retries
from retryctl.models._stages import answer_text, staged_input_bound
from retryctl.models._token_stats import token_stats
from retryctl.nodes._schedule import SamplingSchedule
from retryctl.nodes._state import CandidateRecord

__all__ = ["DrawRequest", "SampleOutcome", "SamplingSchedule", "run_async", "run_sync", "sampling"]

OutputLimit = Callable[[SamplingParams], int]
"""The most output tokens one candidate can have under these parameters (a backend's ``output_limit``)."""


@dataclass(frozen=True)
class DrawRequest:
    """One call to make: ``k`` candidates with these parameters, within ``timeout_s`` (``None``: no limit),
    with ``on_retry`` told of (and deciding on) each transport retry the backend makes inside it."""

    k: int
    params: SamplingParams
    timeout_s: float | None = None
    on_retry: RetryListener | None = field(default=None, compare=False)


def _reserve_on_all(
    ledgers: Sequence[Ledger | StepLedger], usage: BudgetUsage
) -> list[Reservation] | Exhaustion:
    """``usage`` reserved on every ledger (the step's, then the run's), or the first one's refusal, with
    the reservations already made given back."""
    held: list[Reservation] = []
    for ledger in ledgers:
        got = ledger.try_reserve(usage)
        if isinstance(got, Exhaustion):
            for r in held:
                r.release()
            return got
        held.append(got)
    return held


class _TransportCharge:
    """Charges each transport retry of one draw on every ledger, or refuses it at a limit."""

    def __init__(self, ledgers: Sequence[Ledger | StepLedger]) -> None:
        self.ledgers = ledgers
        self.made: list[TransportRetry] = []
        self.refused: list[tuple[TransportRetry, Exhaustion]] = []

    def __call__(self, retry: TransportRetry) -> bool:
        # Reserved and committed at once: the retry is decided now and costs one count whatever it
        # returns (its wait is wall time, which the ledgers' clocks measure).
        cost = BudgetUsage(transport_retries=1)
        held = _reserve_on_all(self.ledgers, cost)
        if isinstance(held, Exhaustion):
            self.refused.append((retry, held))
            return False
        for r in held:
            r.commit(cost)
        self.made.append(retry)
        return True

    def report(self, out: SampleOutcome) -> None:
        """Put the draw's transport retries on the attempt's outcome."""
        out.transport.extend(self.made)
        out.notes.extend(str(retry) for retry in self.made)
        out.notes.extend(
            f"transport retry of {retry.backend} after try {retry.failed_try} refused ({retry.fault}): {why}"
            for retry, why in self.refused
        )


@dataclass
class SampleOutcome:
    """What an attempt's sampling produced."""

    candidates: list[CandidateRecord] = field(default_factory=list)
    stop: StopDecision | None = None
    error: Classification | None = None
    exhausted: Exhaustion | None = None
    notes: list[str] = field(default_factory=list)
    transport: list[TransportRetry] = field(default_factory=list)
    """The transport retries the backend made inside this attempt's draws (each one also a note)."""


def drawn_temperature(params: SamplingParams) -> float:
    """The temperature a draw's samples were made at, as far as telling a repeat goes: a staged
    sample's highest stage temperature (a stage's own, else the draw's), for only where every stage
    is near-greedy are two equal texts one path drawn twice."""
    if not params.stages:
        return params.temperature
    return max(s.temperature if s.temperature is not None else params.temperature for s in params.stages)


def _text_bound(text: str) -> int:
    return prompt_tokens_bound([text]) - PER_MESSAGE_TOKENS - TEMPLATE_TOKENS


def _estimate(
    messages: Sequence[Message],
    req: DrawRequest,
    model: str,
    prices: PriceTable | None,
    output_limit: OutputLimit | None = None,
) -> BudgetUsage:
    # A reservation must be an upper bound: the ledger charges at most what was reserved.
    prompt = prompt_tokens_bound([str(m.get("content") or "") for m in messages])
    if req.params.stages:
        # Each stage's request reads the prompt and the stages before it.
        prompt = staged_input_bound(prompt, req.params.stages, _text_bound)
    input_tokens = prompt * req.k
    per_sample = output_limit(req.params) if output_limit is not None else req.params.token_cap
    output_tokens = per_sample * req.k
    usd = prices.cost(model, input_tokens=input_tokens, output_tokens=output_tokens) if prices else 0.0
    return BudgetUsage(
        attempts=1, samples=req.k, input_tokens=input_tokens, output_tokens=output_tokens, usd=usd
    )


def _actual(candidates: Sequence[Candidate], model: str, prices: PriceTable | None) -> BudgetUsage:
    tokens_in = sum(c.usage.input_tokens for c in candidates)
    tokens_out = sum(c.usage.output_tokens for c in candidates)
    usd = prices.cost(model, input_tokens=tokens_in, output_tokens=tokens_out) if prices else 0.0
    return BudgetUsage(
        attempts=1, samples=len(candidates), input_tokens=tokens_in, output_tokens=tokens_out, usd=usd
    )


def _record(
    c: Candidate,
    answer: str | None,
    attempt: int,
    *,
    repeat: bool,
    cut: bool = False,
    token_cap: int | None = None,
) -> CandidateRecord:
    signal = token_confidence(c.token_logprobs)
    span = weakest_span(c.token_logprobs)
    record = CandidateRecord(
        text=c.text,
        answer=answer,
        token_confidence=signal.value if signal.available else None,
        weakest_span=span.value if span.available else None,
        model=c.model,
        attempt=attempt,
        seed=c.seed,
    )
    if repeat:
        record["repeat"] = True
    if cut:
        record["cut"] = True
    if c.grammar is not None:
        record["grammar"] = c.grammar
    if token_cap is not None and c.logprobs:
        record["tokens"] = token_stats(c.logprobs, token_cap)
    return record


@dataclass
class _Votes:
    """An attempt's candidates as votes: every one drawn is recorded, the repeats are not votes."""

    answers: list[str | None] = field(default_factory=list)
    confidences: list[float | None] = field(default_factory=list)
    floors: list[float | None] = field(default_factory=list)
    drawn: int = 0
    cut: int = 0
    repeats: Repeats = field(default_factory=Repeats)
    token_cap: int | None = None
    """Tokens of each candidate whose diagnostics are kept (the policy's ``token_log``); ``None``: none."""

    def add(
        self, c: Candidate, equivalence: EquivalenceLike, attempt: int, params: SamplingParams
    ) -> CandidateRecord:
        """Record ``c`` (drawn with ``params``); vote unless a repeat or a sample cut short. A staged
        sample's answer is read from its last stage (:func:`~retryctl.models._stages.answer_text`)."""
        self.drawn += 1
        if c.finish_reason == "cut":
            self.cut += 1
            return _record(c, None, attempt, repeat=False, cut=True, token_cap=self.token_cap)
        answer = c.answer
        if answer is None:
            read = answer_text(c.stages, params.stages) if params.stages else c.text
            answer = None if read is None else equivalence(read)
        temperature = c.temperature if c.temperature is not None else drawn_temperature(params)
        repeat = self.repeats.check(c.text, seed=c.seed, temperature=temperature)
        record = _record(c, answer, attempt, repeat=repeat, token_cap=self.token_cap)
        if not repeat:
            self.answers.append(answer)
            self.confidences.append(record["token_confidence"])
            self.floors.append(group_floor(c.token_logprobs) if c.token_logprobs else None)
        return record

    def tally(self, cap: int) -> Tally:
        """The votes as the rule sees them: every sample cut short is one vote fewer it may still get."""
        known = self.confidences if all(c is not None for c in self.confidences) else None
        return Tally.of(self.answers, known, max_samples=max(len(self.answers), cap - self.cut))

    def cut_params(self, rule: StopRule, params: SamplingParams) -> SamplingParams:
        """``params`` with the rule's cut bound, once its first samples set one (a rule without
        ``cut_bound``, or samples without logprobs, leave them as they are)."""
        bound_of = getattr(rule, "cut_bound", None)
        if bound_of is None or not params.logprobs or not self.floors:
            return params
        bound = bound_of(self.floors)
        return params if bound is None or not 0.0 < bound < 1.0 else replace(params, cut_below=bound)


def sampling(
    *,
    messages: Sequence[Message],
    model: str,
    attempt: int,
    min_samples: int,
    max_samples: int,
    rule: StopRule,
    equivalence: EquivalenceLike,
    schedule: SamplingSchedule,
    ledgers: Sequence[Ledger | StepLedger],
    prices: PriceTable | None = None,
    output_limit: OutputLimit | None = None,
    classifier: Classifier = classify,
    strictness: float = 1.0,
    token_log: TokenLog | None = None,
) -> Generator[DrawRequest, list[Candidate], SampleOutcome]:
    """The sampling loop of one attempt; drive it with :func:`run_sync` or :func:`run_async`.

    Each draw is reserved on every ledger in ``ledgers`` (the step's, then the run's) before it is
    yielded, its output tokens at ``output_limit(params)`` a sample (the backend's ``output_limit``:
    a chat model's own ``max_tokens``), or ``params.token_cap`` without one. A refused first draw
    ends the attempt as exhausted; a refused later draw ends sampling early and the attempt is judged
    on the samples it has. A failed draw is classified by ``classifier`` (the step's
    ``retry_on``/``classify``, or :func:`~retryctl.controller.classify`). Every draw is made at
    ``strictness`` (``SamplingParams.strictness``: the member's place on the relaxation schedule).
    Under ``token_log`` (the policy's) each candidate keeps its per-token diagnostics for the log.
    """
    out = SampleOutcome()
    votes = _Votes(token_cap=token_log.max_tokens if token_log is not None and token_log.on else None)
    answers = votes.answers
    cap = max_samples
    plain = min(min_samples, cap)  # the draw's size, asking the rule after every sample
    k = plain
    # Not under a wall-time limit: a batch a backend draws one sample after another could run out
    # of time whole, where one at a time ends early with the samples it has. Not with a
    # disagreement temperature: the draws after the first are drawn with it.
    batching = schedule.disagreement_temperature is None and not _walls_left(ledgers)
    if batching:
        k = min(max(plain, fewest_more(rule, Tally.of((), max_samples=cap))), cap)
    while True:
        charge = _TransportCharge(ledgers)
        params = votes.cut_params(
            rule,
            schedule.params(
                attempt=attempt, drawn=votes.drawn, disagreed=bool(answers), strictness=strictness
            ),
        )
        req = DrawRequest(k, params, on_retry=charge)
        held = _reserve_on_all(ledgers, _estimate(messages, req, model, prices, output_limit))
        if isinstance(held, Exhaustion) and k > plain:
            # The budget may not hold the whole batch: then as many as drawing one by one would get.
            req = DrawRequest(plain, params, on_retry=charge)
            held = _reserve_on_all(ledgers, _estimate(messages, req, model, prices, output_limit))
        if isinstance(held, Exhaustion):
            if not answers:
                out.exhausted = held
            else:
                out.notes.append(f"sampling ended early: {held}")
            return out
        # The call may take no longer than the wall budget left at any scope: a backend's own retries
        # (waiting out a long Retry-After) must not carry the step past its time limit.
        walls = _walls_left(ledgers)
        if walls:
            req = replace(req, timeout_s=min(walls))
        try:
            drawn = yield req
        except Exception as exc:
            # A failed call is still a call: it spends an attempt (so a flaky server cannot be retried
            # past the attempts budget), but no samples or tokens, which it did not deliver.
            for r in held:
                r.commit(BudgetUsage(attempts=1))
            charge.report(out)
            out.error = classifier(exc)
            return out
        charge.report(out)
        for r in held:
            r.commit(_actual(drawn, model, prices))
        before, cut_before = len(answers), votes.cut
        out.candidates += [votes.add(c, equivalence, attempt, params) for c in drawn]
        if drawn and len(answers) == before and votes.cut == cut_before:
            # A whole draw of repeats (near-greedy, or seeds already drawn): more of the same would
            # add samples and cost but no evidence, so the attempt is judged on what it has.
            out.notes.append(
                f"sampling ended early: the last {len(drawn)} samples only repeated earlier ones "
                f"(temperature {drawn_temperature(params):g}), so more would add no evidence"
            )
            return out
        decision = rule(votes.tally(cap))
        out.stop = decision
        if decision.max_samples is not None:
            cap = max(votes.drawn, min(cap, decision.max_samples))
        if decision.stop or votes.drawn >= cap:
            return out
        # The samples the rule is sure to need, in one call: the same samples and the same stop as
        # asking it after each one, without waiting for them one by one.
        plain = min(schedule.batch, cap - votes.drawn)
        k = plain
        if not _walls_left(ledgers):
            k = min(max(plain, fewest_more(rule, votes.tally(cap))), cap - votes.drawn)


def _walls_left(ledgers: Sequence[Ledger | StepLedger]) -> list[float]:
    """The wall time left at each scope that has a wall-time limit (none: no limit)."""
    return [w for ledger in ledgers if (w := ledger.remaining().wall_s) is not None]


def _listening(req: DrawRequest) -> AbstractContextManager[None]:
    return transport_retries(req.on_retry) if req.on_retry is not None else nullcontext()


def run_sync(
    loop: Generator[DrawRequest, list[Candidate], SampleOutcome],
    backend: ModelBackend,
    messages: Sequence[Message],
) -> SampleOutcome:
    """Drive :func:`sampling` with blocking draws."""
    try:
        req = next(loop)
        while True:
            try:
                with _listening(req):
                    drawn = sample_blocking(backend, messages, req.params, k=req.k, timeout_s=req.timeout_s)
            except Exception as exc:
                req = loop.throw(exc)
                continue
            req = loop.send(drawn)
    except StopIteration as done:
        outcome: SampleOutcome = done.value
        return outcome


async def run_async(
    loop: Generator[DrawRequest, list[Candidate], SampleOutcome],
    backend: ModelBackend,
    messages: Sequence[Message],
) -> SampleOutcome:
    """Drive :func:`sampling` with awaited draws, giving a batch's turn up around each one."""
    try:
        req = next(loop)
        while True:
            try:
                with _listening(req):
                    async with yielded_turn():
                        drawn = await sample_within(
                            backend, messages, req.params, k=req.k, timeout_s=req.timeout_s
                        )
            except Exception as exc:
                req = loop.throw(exc)
                continue
            req = loop.send(drawn)
    except StopIteration as done:
        outcome: SampleOutcome = done.value
        return outcome
