"""Sampling a final answer: drawn again until the stopping rule stops, then judged on its agreement.

A step of the model-call flow (:mod:`._models`), a generator in the flow's shape: it yields the
:class:`~langchain.agents.middleware.ModelRequest` of each extra draw and is sent its response or the
exception it raised. No I/O of its own.
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from typing import Any

from langchain.agents.middleware.types import ModelRequest, ModelResponse
from langchain_core.messages import AIMessage, BaseMessage

from retryctl.controller import (
    Act,
    EquivalenceLike,
    Exhaustion,
    Observation,
    Policy,
    PriceTable,
    Reservation,
    Tally,
    Usage,
    Verdict,
)
from retryctl.middleware._estimate import actual_usage, model_key
from retryctl.middleware._runs import Run
from retryctl.nodes._lc_runs import attempt_scope

__all__ = ["Draws", "is_final", "response_text", "sample_final"]

Draws = Generator[
    ModelRequest[Any] | float,
    ModelResponse[Any] | BaseException | None,
    tuple[Verdict, ModelResponse[Any]],
]
"""The sampling's generator: yields the draws to make, returns the verdict and the draw to hand back."""


def sample_final(
    call: ModelRequest[Any],
    run: Run,
    first: ModelResponse[Any],
    *,
    judge: Callable[..., Verdict],
    act: Act,
    policy: Policy,
    equivalence: EquivalenceLike,
    reserve: Callable[[Run, ModelRequest[Any], str], Reservation | Exhaustion],
    prices: PriceTable | None,
) -> Draws:
    """Draw the final answer again until the stopping rule stops (or ``max_samples``), then judge
    the leader's agreement. Extra draws that fail or that the budget refuses end the sampling.

    Returns the verdict and the draw to hand back: the first one whose answer is the verdict's
    (the answer the stopping rule stood behind, else the most voted), never simply the first
    draw. The verdict's record names it (``candidates_summary``: ``answers`` of the draws in
    order, ``chosen`` its index among them)."""
    rule = policy.stopping_rule()
    draws = [first]
    answers = [equivalence(response_text(first))]
    stop = None
    while len(answers) < policy.max_samples:
        if len(answers) >= policy.min_samples:
            stop = rule(Tally.of(answers, max_samples=policy.max_samples))
            if stop.stop:
                break
        held = reserve(run, call, model_key(call.model))
        if isinstance(held, Exhaustion):
            break
        run.count("model")
        with attempt_scope(act.attempt, act.target):  # a draw of the same attempt, tagged as it is
            drawn = yield call
        if not isinstance(drawn, ModelResponse):
            held.commit(Usage(attempts=1, samples=1))
            break
        held.commit(actual_usage(drawn.result, model_key(call.model), prices))
        draws.append(drawn)
        answers.append(equivalence(response_text(drawn)) if is_final(drawn) else None)
    tally = Tally.of(answers, max_samples=policy.max_samples)
    stop = rule(tally)
    # The answer ``decide`` will put on the verdict (its own rule, not a copy of it).
    leader = Observation(tally=tally, stop=stop).answer
    chosen = next((i for i, a in enumerate(answers) if a == leader), 0)
    verdict = judge(tally=tally, stop=stop, summary={"answers": answers, "chosen": chosen})
    return verdict, draws[chosen]


def is_final(response: ModelResponse[Any]) -> bool:
    """Whether ``response`` is the agent's final answer: no tool calls, no structured response."""
    last = next((m for m in reversed(response.result) if isinstance(m, AIMessage)), None)
    return last is not None and not last.tool_calls and response.structured_response is None


def response_text(response: ModelResponse[Any]) -> str:
    """The text of ``response``'s last message."""
    last = next((m for m in reversed(response.result) if isinstance(m, BaseMessage)), None)
    return last.text if last is not None else ""
