"""Adaptive sampling for a reasoning step: draw ``min_samples``, ask the stopping rule, draw more until it
stops or ``max_samples`` is reached, reserving budget before every draw and committing it after.

The loop is one generator with no I/O (as httpx drives auth flows): it yields a :class:`DrawRequest`
and receives the candidates, or the exception the backend raised. :func:`run_sync` and :func:`run_async`
only perform the draws, so the sync and async steps share every decision.
"""

from __future__ import annotations

import math
from collections.abc import Generator, Sequence
from dataclasses import dataclass, field, replace

from retryctl.controller import (
    Classification,
    EquivalenceLike,
    Exhaustion,
    Ledger,
    PriceTable,
    Reservation,
    StepLedger,
    StopDecision,
    StopRule,
    Tally,
    classify,
    token_confidence,
)
from retryctl.controller import Usage as BudgetUsage
from retryctl.exceptions import ConfigError
from retryctl.models import Candidate, ModelBackend, SamplingParams, sample_blocking
from retryctl.models._base import sample_within
from retryctl.models._messages import Message
from retryctl.nodes._state import CandidateRecord

__all__ = ["DrawRequest", "SampleOutcome", "SamplingSchedule", "run_async", "run_sync", "sampling"]

_SEED_STRIDE = 1000  # seeds of successive attempts never overlap while an attempt draws < 1000 samples


@dataclass(frozen=True, kw_only=True)
class SamplingSchedule:
    """The sampling knobs of each attempt of a step.

    The temperature of attempt ``n`` is ``temperatures[n - 1]`` (the last one repeats): e.g.
    ``(0.2, 0.7, 1.0)`` starts nearly greedy and widens the search on each retry. Once ``min_samples``
    are in and the stopping rule asks for more (the samples disagree), further draws use
    ``disagreement_temperature`` when it is set. Every candidate gets its own seed (``seed`` + a stride
    per attempt + its index), so branches differ and a rerun draws the same ones.
    """

    temperatures: tuple[float, ...] = (0.7,)
    """Temperature per attempt; the last value repeats."""
    disagreement_temperature: float | None = None
    """Temperature of the extra draws made because the samples disagreed; ``None`` keeps the attempt's."""
    top_p: float | None = None
    """Nucleus sampling mass, ``None`` for the backend default."""
    seed: int | None = None
    """Base seed; ``None`` leaves seeding to the backend."""
    max_tokens: int = 512
    """Most tokens per candidate (also the output-token reservation per sample)."""
    batch: int = 1
    """Samples per extra draw once ``min_samples`` are in."""

    def __post_init__(self) -> None:
        if not self.temperatures:
            raise ConfigError(
                field="temperatures", value=self.temperatures, problem="needs at least one value"
            )
        for i, t in enumerate(self.temperatures):
            if not 0.0 <= t <= 5.0 or math.isnan(t):
                raise ConfigError(field=f"temperatures[{i}]", value=t, problem="must be in [0, 5]")
        dt = self.disagreement_temperature
        if dt is not None and (not 0.0 <= dt <= 5.0 or math.isnan(dt)):
            raise ConfigError(field="disagreement_temperature", value=dt, problem="must be in [0, 5]")
        if self.batch < 1:
            raise ConfigError(field="batch", value=self.batch, problem="must be >= 1")
        # The rest (top_p, seed, max_tokens) is checked by SamplingParams itself.
        self.params(attempt=1, drawn=0, disagreed=False)

    def params(self, *, attempt: int, drawn: int, disagreed: bool) -> SamplingParams:
        """The sampling parameters of the draw that starts at sample ``drawn`` of ``attempt``."""
        temperature = self.temperatures[min(attempt, len(self.temperatures)) - 1]
        if disagreed and self.disagreement_temperature is not None:
            temperature = self.disagreement_temperature
        seed = None
        if self.seed is not None:
            seed = (self.seed + _SEED_STRIDE * (attempt - 1) + drawn) % 2**31
        return SamplingParams(
            temperature=temperature, top_p=self.top_p, seed=seed, max_tokens=self.max_tokens
        )


@dataclass(frozen=True)
class DrawRequest:
    """One call to make: ``k`` candidates with these parameters, within ``timeout_s`` (``None``: no limit)."""

    k: int
    params: SamplingParams
    timeout_s: float | None = None


@dataclass
class SampleOutcome:
    """What an attempt's sampling produced."""

    candidates: list[CandidateRecord] = field(default_factory=list)
    stop: StopDecision | None = None
    error: Classification | None = None
    exhausted: Exhaustion | None = None
    notes: list[str] = field(default_factory=list)


def _estimate(
    messages: Sequence[Message], req: DrawRequest, model: str, prices: PriceTable | None
) -> BudgetUsage:
    # No tokenizer here: two characters per token over-estimates every real tokenizer, and a
    # reservation must be an upper bound (the ledger charges at most what was reserved).
    chars = sum(len(str(m.get("content") or "")) for m in messages)
    input_tokens = (chars // 2 + 8 * len(messages)) * req.k
    output_tokens = req.params.max_tokens * req.k
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


def _record(c: Candidate, answer: str | None, attempt: int) -> CandidateRecord:
    signal = token_confidence(c.token_logprobs)
    return CandidateRecord(
        text=c.text,
        answer=answer,
        token_confidence=signal.value if signal.available else None,
        model=c.model,
        attempt=attempt,
        seed=c.seed,
    )


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
) -> Generator[DrawRequest, list[Candidate], SampleOutcome]:
    """The sampling loop of one attempt; drive it with :func:`run_sync` or :func:`run_async`.

    Each draw is reserved on every ledger in ``ledgers`` (the step's, then the run's) before it is
    yielded. A refused first draw ends the attempt as exhausted; a refused later draw ends sampling
    early and the attempt is judged on the samples it has.
    """
    out = SampleOutcome()
    answers: list[str | None] = []
    confidences: list[float | None] = []
    cap = max_samples
    k = min(min_samples, cap)
    while True:
        req = DrawRequest(k, schedule.params(attempt=attempt, drawn=len(answers), disagreed=bool(answers)))
        held: list[Reservation] = []
        for ledger in ledgers:
            got = ledger.try_reserve(_estimate(messages, req, model, prices))
            if isinstance(got, Exhaustion):
                for r in held:
                    r.release()
                if not answers:
                    out.exhausted = got
                else:
                    out.notes.append(f"sampling ended early: {got}")
                return out
            held.append(got)
        # The call may take no longer than the wall budget left at any scope: a backend's own retries
        # (waiting out a long Retry-After) must not carry the step past its time limit.
        walls = [w for ledger in ledgers if (w := ledger.remaining().wall_s) is not None]
        if walls:
            req = replace(req, timeout_s=min(walls))
        try:
            drawn = yield req
        except Exception as exc:
            # A failed call is still a call: it spends an attempt (so a flaky server cannot be retried
            # past the attempts budget), but no samples or tokens, which it did not deliver.
            for r in held:
                r.commit(BudgetUsage(attempts=1))
            out.error = classify(exc)
            return out
        for r in held:
            r.commit(_actual(drawn, model, prices))
        for c in drawn:
            answer = c.answer if c.answer is not None else equivalence(c.text)
            record = _record(c, answer, attempt)
            out.candidates.append(record)
            answers.append(answer)
            confidences.append(record["token_confidence"])
        conf_list = confidences if all(c is not None for c in confidences) else None
        decision = rule(Tally.of(answers, conf_list, max_samples=cap))
        out.stop = decision
        if decision.max_samples is not None:
            cap = max(len(answers), min(cap, decision.max_samples))
        if decision.stop or len(answers) >= cap:
            return out
        k = min(schedule.batch, cap - len(answers))


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
    """Drive :func:`sampling` with awaited draws."""
    try:
        req = next(loop)
        while True:
            try:
                drawn = await sample_within(backend, messages, req.params, k=req.k, timeout_s=req.timeout_s)
            except Exception as exc:
                req = loop.throw(exc)
                continue
            req = loop.send(drawn)
    except StopIteration as done:
        outcome: SampleOutcome = done.value
        return outcome
