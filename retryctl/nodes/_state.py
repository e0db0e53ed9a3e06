"""The typed state of a controlled step, kept JSON-plain so any checkpointer can store it.

Every value in the state is a dict, list, str, number or ``None`` (and LangChain messages in
``messages``): a checkpoint written by one process must load in another without unpickling retryctl
objects, and the same state must serialise under any LangGraph checkpointer.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, NotRequired, TypedDict

from langchain_core.messages import AnyMessage
from langgraph.graph.message import add_messages

__all__ = [
    "CandidateRecord",
    "ControlState",
    "StepInput",
    "StepOutput",
    "StepResult",
    "StepState",
    "StepVerdict",
    "append_or_reset",
]

ResultStatus = Literal["accepted", "answered_by_user", "stopped", "needs_user"]


class CandidateRecord(TypedDict):
    """One sampled candidate as the state keeps it."""

    text: str
    """The candidate's text."""
    answer: str | None
    """Its canonical answer after answer equivalence, ``None`` when none could be extracted."""
    token_confidence: float | None
    """exp(mean token logprob), ``None`` without logprobs."""
    weakest_span: NotRequired[float | None]
    """The lowest geometric-mean probability over 8 consecutive tokens, ``None`` without logprobs."""
    model: str
    """The backend that produced it."""
    attempt: int
    """The attempt that drew it."""
    seed: int | None
    """The seed it was drawn with."""
    repeat: NotRequired[bool]
    """It repeats an earlier candidate of the attempt (same text, same seed or both near-greedy:
    :class:`~retryctl.controller.Repeats`): kept and shown, but not a vote."""
    cut: NotRequired[bool]
    """It was cut short (its running group confidence fell below the stopping rule's bound): its
    tokens were spent, but it has no answer and is not a vote."""
    grammar: NotRequired[str]
    """The grammar it was decoded under (``Candidate.grammar``); absent when none shaped it."""
    tokens: NotRequired[dict[str, Any]]
    """Its per-token diagnostics (:func:`~retryctl.models._token_stats.token_stats`), when the
    policy's ``token_log`` is on and the backend gave logprobs; absent otherwise."""


class StepVerdict(TypedDict):
    """One verdict of the step with where it happened: the verdict dump plus attempt and target."""

    attempt: int
    """1-based attempt number within the step (a round ending in one verdict, see ``StepResult.attempts``)."""
    target: str | None
    """The model or tool that acted in that attempt."""
    verdict: dict[str, Any]
    """``Verdict.model_dump(mode="json")``: action, reason, confidence, answer, evidence..."""


class StepResult(TypedDict):
    """How a step ended. A ``stopped`` step is a normal result, never an exception."""

    status: ResultStatus
    """``accepted`` (the controller accepted a candidate), ``answered_by_user``, ``stopped``, or
    ``needs_user`` (the controller asked a person and the step is not interactive)."""
    answer: str | None
    """The accepted (or the user's) canonical answer; otherwise the best answer so far."""
    text: str | None
    """The full text of that candidate (or the user's answer)."""
    confidence: float | None
    """The fused confidence of the last verdict."""
    reason: str
    """Why the step ended, as the last verdict (or the user) said."""
    served_by: str | None
    """Who produced ``answer``: the member of the equivalence group (the model's name) whose candidate
    it is, ``"user"`` when a person gave it, ``None`` when no candidate was drawn."""
    usage: dict[str, float]
    """What the step used, by budget limit name. ``usage["attempts"]`` counts *calls* (backend
    requests), which an attempt may make several of: see :attr:`attempts`."""
    limits: dict[str, float | None]
    """The step's budget limits with any extension the user granted, by name; ``None`` where off."""
    attempts: int
    """Attempts made: rounds of act, assess and decide, each ending in one verdict (the ``attempt`` of
    the verdict records). Not the budget's ``attempts``, which counts calls (``usage["attempts"]``)."""


class ControlState(TypedDict, total=False):
    """The controller's bookkeeping for one step, in one key so it never collides with a parent's keys."""

    attempt: int
    """Attempts started so far."""
    target: str | None
    """The model currently sampled (a member of the equivalence group)."""
    tried: list[str]
    """Models already switched away from."""
    retries: int
    """Transient retries of the current target."""
    refines: int
    """Refine rounds so far."""
    switches: int
    """Switches so far."""
    asks: int
    """Questions put to a person so far."""
    feedback: list[dict[str, Any]]
    """Earlier refines: ``{"previous": best text, "feedback": message}``, replayed into later prompts."""
    error: dict[str, Any] | None
    """The classified error of the last attempt: ``error_class``, ``reason``, ``retry_after_s``..."""
    exhausted: dict[str, Any] | None
    """The spent budget limit of the last attempt, if any."""
    stop: dict[str, Any] | None
    """The stopping rule's decision about the last attempt's samples."""
    signals: list[dict[str, Any]]
    """Signals measured by ``assess``: name, value, available, note."""
    validators: list[dict[str, Any]]
    """Validator results of the best candidate: name, passed, evidence."""
    breakers: dict[str, str]
    """Breaker states when the attempt ran."""
    extra_budget: dict[str, float]
    """Budget the user added through ``ask_user`` (added to the step budget's limits)."""
    elapsed_s: float
    """Wall seconds spent acting so far, across processes."""
    latency_ms: float
    """Latency of the last attempt."""
    called: bool
    """Whether the last attempt called its model (``False``: a breaker or the budget refused it)."""
    charged: dict[str, float]
    """What the last attempt charged to the step's ledger (its verdict's ``budget_charged``)."""
    notes: list[str]
    """Facts about the last attempt worth explaining (e.g. sampling ended early on a budget)."""
    best: dict[str, Any] | None
    """The best candidate so far: ``answer``, ``text``, ``model``, ``attempt``, and ``index``, its place
    among the attempt's candidates."""
    votes_by_member: dict[str, dict[str, int]]
    """Every member's votes so far in this step (answer -> count), for the ``cross_member`` signal."""
    last_verdict: dict[str, Any] | None
    """The latest verdict, dumped to JSON."""
    stop_reason: str | None
    """Why the step stops when it was not a verdict's reason (the user chose to stop)."""
    relaxed: dict[str, int]
    """Failures under a grammar so far, by member: its strictness is the policy's
    ``relaxation.strictness(failures)`` (absent: none yet)."""


def append_or_reset(left: list[StepVerdict] | None, right: list[StepVerdict] | None) -> list[StepVerdict]:
    """The verdict history's reducer: append, or start over when a new step run writes ``None``."""
    if right is None:
        return []
    return [*(left or []), *right]


class StepInput(TypedDict):
    """What a controlled step reads: the conversation so far."""

    messages: Annotated[list[AnyMessage], add_messages]


class StepOutput(TypedDict, total=False):
    """What a controlled step hands back to a parent graph."""

    messages: Annotated[list[AnyMessage], add_messages]
    """The conversation with the accepted answer appended as an AI message."""
    result: StepResult | None
    """How the step ended."""
    verdicts: Annotated[list[StepVerdict], append_or_reset]
    """Every verdict of the step, in order."""


class StepState(TypedDict, total=False):
    """The full state of a controlled step graph."""

    messages: Annotated[list[AnyMessage], add_messages]
    """Inputs: the conversation the step answers."""
    candidates: list[CandidateRecord]
    """The candidates of the current attempt."""
    verdicts: Annotated[list[StepVerdict], append_or_reset]
    """Verdict history of the current run of the step."""
    usage: dict[str, float]
    """Ledger usage of the step so far, by limit name."""
    result: StepResult | None
    """Set by ``accept`` or ``stop``."""
    control: ControlState
    """The controller's bookkeeping."""
