"""The decision log's record shapes (schema version 1), as pydantic models.

Three kinds of record share one hash chain:

- ``verdict``: one per controller verdict, with every part of its evidence;
- ``summary``: one per question (step) when a run ends;
- ``repair``: written only when a writer opened with ``repair=True`` cut a torn last line, so that the
  cut itself is on the record.

Each kind has a *body* model (what the writer validates before chaining) and a chained model that adds
``prev_hash`` and ``hash`` (what a reader gets back). Bodies allow extra top-level keys so that user
structlog processors can add context such as a host name; the chain covers them like any other key.
"""

from __future__ import annotations

import json
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, JsonValue, TypeAdapter, ValidationError

from retryctl.audit._canonical import SCHEMA_VERSION
from retryctl.controller import Action, Verdict

__all__ = [
    "BODY_MODELS",
    "SCHEMA_VERSION",
    "BudgetState",
    "LogRecord",
    "RepairBody",
    "RepairRecord",
    "SummaryBody",
    "SummaryRecord",
    "VerdictBody",
    "VerdictRecord",
    "describe_errors",
    "parse_record",
    "record_problem",
    "summary_fields",
    "verdict_fields",
]

_HEX64 = r"^[0-9a-f]{64}$"


class _Body(BaseModel):
    """Fields every record has before it is chained."""

    # Extra keys are allowed (user processors add context); non-finite floats are refused because
    # canonical JSON cannot carry them.
    model_config = ConfigDict(frozen=True, extra="allow", populate_by_name=True, allow_inf_nan=False)

    schema_version: Literal[1] = Field(default=1, alias="schema")
    """The record schema version (serialised as ``schema``)."""
    ts: str = Field(min_length=1)
    """When the record was written: ISO 8601, UTC, as structlog's ``TimeStamper(fmt="iso")`` writes it."""


class BudgetState(BaseModel):
    """The ledger at decision time."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    used: dict[str, float] = Field(default_factory=dict)
    """Totals used, by limit name (``samples``, ``usd``, ...)."""
    limit: dict[str, float | None] = Field(default_factory=dict)
    """Limits by name; ``None`` means the limit is off."""
    scope: Literal["step", "run"] | None = None
    """Whose ledger this is: ``step``, the step's own (``used`` is what this step spent so far);
    ``run``, one the step shares with the other steps of its run (``used`` is what all of them spent
    so far). ``None``: not said (logs written before it was recorded: read as ``step``)."""
    charged: dict[str, float] = Field(default_factory=dict)
    """What this verdict's attempt charged to the ledger, by limit name (with ``scope``, what an audit
    counts)."""


class VerdictBody(_Body):
    """One controller verdict and everything it was decided on."""

    kind: Literal["verdict"] = "verdict"
    """Record kind."""
    run_id: str = Field(min_length=1)
    """The run (one agent invocation, one batch task...) this verdict belongs to."""
    step_id: str = Field(min_length=1)
    """The wrapped step (question, node, tool call) within the run."""
    attempt: int = Field(ge=0)
    """Which attempt of the step this verdict closes."""
    action: Action
    """``accept``, ``refine``, ``retry``, ``switch``, ``ask_user`` or ``stop``."""
    reason: str
    """The verdict's human-readable reason."""
    confidence: float | None = None
    """Fused confidence of the best candidate, when there were candidates and a check ran on them."""
    checked: bool = True
    """``False`` when no check ran on the result the verdict judged (``"accepted unchecked: ..."``):
    its ``confidence`` is then ``null``. A record written before the field existed has no key, and
    reads as checked: its confidence is what it claimed (schema version 1 still: a reader of the
    version that lacks the field keeps it as an extra key)."""
    answer: str | None = None
    """The best candidate's canonical answer, when there was one."""
    target: str | None = None
    """The tool or model that acted in this attempt (the member of its equivalence group)."""
    switch_to: str | None = None
    """For ``switch``: the tool or model switched to."""
    feedback: str | None = None
    """For ``refine``: the message given to the model."""
    retry_after_s: float | None = None
    """For ``retry``: the delay the fault asked for, if any."""
    signals: dict[str, float] = Field(default_factory=dict)
    """Named signals in [0, 1]."""
    weights: dict[str, float] = Field(default_factory=dict)
    """The weight each signal had in the fusion."""
    thresholds: dict[str, float] = Field(default_factory=dict)
    """The thresholds the policy compared against."""
    budget: BudgetState = Field(default_factory=BudgetState)
    """Ledger totals and limits."""
    breaker: dict[str, str] = Field(default_factory=dict)
    """Breaker state by key: ``closed``, ``open`` or ``half_open``."""
    error_class: str | None = None
    """The class of the error that led to this verdict, if any."""
    stopping: dict[str, JsonValue] = Field(default_factory=dict)
    """What the stopping rule said (``stop``, ``confidence``, ``reason``, ``rule``...)."""
    notes: list[str] = Field(default_factory=list)
    """Degradations and other facts worth explaining."""
    candidates_summary: JsonValue = None
    """A compact account of the candidates (e.g. answer counts); the caller chooses its shape."""
    latency_ms: float = Field(ge=0)
    """Wall time the step took up to this verdict, in milliseconds."""
    extra: dict[str, JsonValue] = Field(default_factory=dict)
    """Caller-supplied context that does not fit the fields above."""


class SummaryBody(_Body):
    """How one question (step) ended, written once per question when a run ends."""

    kind: Literal["summary"] = "summary"
    """Record kind."""
    run_id: str = Field(min_length=1)
    """The run this summary closes."""
    step_id: str = Field(min_length=1)
    """The question (step) summarised."""
    final_answer: str | None
    """The answer the step ended with, or ``None`` if it ended without one."""
    sampling_history: list[JsonValue]
    """What was sampled, in order (answers, or small dicts per sample)."""
    budget_used: dict[str, float]
    """What the step used, by limit name (``samples``, ``usd``, ...)."""
    budget_max: dict[str, float | None]
    """The step's limits by name (after any budget-by-difficulty adjustment); ``None`` is off."""
    estimated_difficulty: float | str | None = None
    """The difficulty estimate that set the step's budget (a score or a stratum name)."""
    extra: dict[str, JsonValue] = Field(default_factory=dict)
    """Caller-supplied context."""


class RepairBody(_Body):
    """A writer cut a torn last line (a write cut short by a crash) before appending."""

    kind: Literal["repair"] = "repair"
    """Record kind."""
    truncated_bytes: int = Field(ge=1)
    """How many bytes were cut."""
    truncated_sha256: str = Field(pattern=_HEX64)
    """sha256 of the bytes that were cut, so that a saved copy can be matched to this record."""


class _Chained(BaseModel):
    """The two chain fields, added by the sink."""

    prev_hash: str = Field(pattern=_HEX64)
    """The previous record's ``hash`` (64 zeros for the first record)."""
    hash: str = Field(pattern=_HEX64)
    """sha256 of this record's canonical JSON without ``hash``."""


class VerdictRecord(VerdictBody, _Chained):
    """A chained verdict record, as read back from a log."""


class SummaryRecord(SummaryBody, _Chained):
    """A chained summary record, as read back from a log."""


class RepairRecord(RepairBody, _Chained):
    """A chained repair record, as read back from a log."""


LogRecord = Annotated[VerdictRecord | SummaryRecord | RepairRecord, Field(discriminator="kind")]
"""Any record of a log, told apart by ``kind``."""

_RECORD_ADAPTER: TypeAdapter[VerdictRecord | SummaryRecord | RepairRecord] = TypeAdapter(LogRecord)
BODY_MODELS: dict[str, type[_Body]] = {  # the model a writer validates each kind against
    "verdict": VerdictBody,
    "summary": SummaryBody,
    "repair": RepairBody,
}


def parse_record(obj: Any) -> VerdictRecord | SummaryRecord | RepairRecord:
    """Validate one decoded log line into its typed record (raises ``pydantic.ValidationError``)."""
    return _RECORD_ADAPTER.validate_python(obj)


def record_problem(obj: Any) -> str | None:
    """What is wrong with a decoded line whose ``kind`` is a record kind, or ``None``.

    Checked strictly, as JSON gives the values (``"1"`` is not an attempt number); a line of another
    ``kind`` is not this schema's to judge (``None``). The problem names the first bad field.
    """
    if not isinstance(obj, dict) or obj.get("kind") not in BODY_MODELS:
        return None
    try:
        # From JSON, where strict mode takes an action's string for the enum but no "1" for an int.
        _RECORD_ADAPTER.validate_json(json.dumps(obj), strict=True)
    except ValidationError as exc:
        return describe_errors(exc, tag=str(obj["kind"]))
    return None


def describe_errors(exc: ValidationError, *, tag: str | None = None) -> str:
    """A pydantic error in one line: the first bad field, what is wrong, the value (and how many more)."""
    errors = exc.errors(include_url=False)
    first = errors[0]
    loc = list(first["loc"])
    if tag is not None and loc and loc[0] == tag:
        loc = loc[1:]  # the discriminated union's tag: the record kind, not a field
    where = ".".join(str(part) for part in loc) or "record"
    got = "" if first["type"] == "missing" else f" (got {_short_repr(first.get('input'))})"
    more = f"; {len(errors) - 1} more problem(s)" if len(errors) > 1 else ""
    return f"field {where!r}: {first['msg']}{got}{more}"


def _short_repr(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def verdict_fields(
    verdict: Verdict,
    *,
    run_id: str,
    step_id: str,
    attempt: int,
    candidates_summary: Any,
    latency_ms: float,
    target: str | None = None,
    extra: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The body fields of a verdict record (without ``schema``, ``ts`` and the chain)."""
    # Dumping in JSON mode turns tuples, enums and the like (e.g. inside ``stopping``) into JSON
    # values. Every top-level field of the verdict is kept, including any added after this schema.
    top = verdict.model_dump(mode="json", exclude={"evidence"})
    ev = verdict.evidence.model_dump(mode="json")
    return {
        **top,
        "run_id": run_id,
        "step_id": step_id,
        "attempt": attempt,
        "target": target,
        "signals": ev["signals"],
        "weights": ev["weights"],
        "thresholds": ev["thresholds"],
        "budget": {
            "used": ev["budget_used"],
            "limit": ev["budget_limit"],
            "scope": ev["budget_scope"],
            "charged": ev["budget_charged"],
        },
        "breaker": ev["breakers"],
        "error_class": ev["error_class"],
        "stopping": ev["stopping"],
        "notes": ev["notes"],
        "candidates_summary": candidates_summary,
        "latency_ms": latency_ms,
        "extra": dict(extra or {}),
    }


def summary_fields(
    *,
    run_id: str,
    step_id: str,
    final_answer: str | None,
    sampling_history: list[Any],
    budget_used: dict[str, float],
    budget_max: dict[str, float | None],
    estimated_difficulty: float | str | None = None,
    extra: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The body fields of a summary record (without ``schema``, ``ts`` and the chain)."""
    return {
        "run_id": run_id,
        "step_id": step_id,
        "final_answer": final_answer,
        "sampling_history": list(sampling_history),
        "budget_used": dict(budget_used),
        "budget_max": dict(budget_max),
        "estimated_difficulty": estimated_difficulty,
        "extra": dict(extra or {}),
    }
