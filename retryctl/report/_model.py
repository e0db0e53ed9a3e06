"""What an audit is made of: the data types every other module of ``retryctl.report`` reads or fills.

A *step* is one ``(run_id, step_id)`` pair: a question of a run, or a tool call. :class:`StepOutcome`
is how one step went; :class:`Analysis` is everything an audit reports about one or more logs, as the
fold (:mod:`retryctl.report._fold`) leaves it. This module imports nothing else of the package: the
scanner, the folds, the entry points and the renderers all import it, never the other way round.
"""

from __future__ import annotations

import gc
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, TypeGuard

import msgspec

from retryctl._answers import answers_agree

__all__ = [
    "CONFIDENCE_BINS",
    "MAX_TOKEN_ROWS",
    "PARALLEL_MIN_BYTES",
    "Analysis",
    "StepOutcome",
    "TokenRow",
    "add_token_rows",
    "attempt_label",
    "no_cyclic_gc",
    "token_row",
]

CONFIDENCE_BINS = 20
"""Bins of the confidence histogram over [0, 1]."""

MAX_TOKEN_ROWS = 400
"""Rows kept for the per-token heat map (the first ones logged): 20 questions of a few attempts of
five samples each, drawn one section per step."""

PARALLEL_MIN_BYTES = 64 << 20
"""Logs of fewer bytes in all are audited in one process: a fork costs more than it saves there."""


class StepOutcome(msgspec.Struct, array_like=True, gc=False):
    """How one step (``run_id``, ``step_id``) went, from its verdicts and its summary record.

    A ``msgspec`` struct (mutable, compared by value): a worker process hands its steps over as
    msgpack arrays (:mod:`retryctl.report._handover`), and making a million of them is cheaper.
    """

    run_id: str
    """The run."""
    step_id: str
    """The step within the run."""
    verdicts: int = 0
    """Verdict records seen."""
    actions: list[str] = msgspec.field(default_factory=list)
    """Actions in order."""
    attempts: int | float = 0
    """Attempts made: what the step's records charged (``budget.charged``), or, for records that do
    not say, the highest attempt number."""
    samples: int | float = 0.0
    """Samples the step used: its own ledger's total (or the summary's ``budget_used``), or, where its
    records give a run's ledger, the sum of what its attempts charged to it."""
    usd: int | float = 0.0
    """Cost in USD, likewise."""
    limits: dict[str, Any] = msgspec.field(default_factory=dict)
    """The step's limits by name (``None`` is off), from its last verdict or summary."""
    last_action: str | None = None
    """The last verdict's action (``None`` for a step with a summary only)."""
    last_confidence: int | float | None = None
    """The last verdict's fused confidence."""
    last_reason: str = ""
    """The last verdict's reason."""
    threshold: Any = None
    """The accept threshold the last verdict was judged against."""
    answer: Any = None
    """The summary's ``final_answer``, else the last verdict's answer."""
    gold: str | None = None
    """The gold answer, when the log carries one (``extra.gold``)."""
    has_summary: bool = False
    """Whether the run wrote a summary record for this step."""
    input_tokens: int | float = 0.0
    """Input tokens of the step's own ledger at its last verdict, for records that give no charge
    (what a verdict spent is the increase)."""
    output_tokens: int | float = 0.0
    """Output tokens, likewise."""

    @property
    def accepted(self) -> bool:
        """Whether the step ended in ``accept``."""
        return self.last_action == "accept"

    @property
    def correct(self) -> bool | None:
        """Whether the answer matches the gold answer; ``None`` without gold."""
        if self.gold is None:
            return None
        return self.answer is not None and answers_agree(self.answer, self.gold)

    @property
    def at_max_budget(self) -> bool:
        """Whether some limit of the step was used up."""
        used = {"samples": self.samples, "usd": self.usd}
        for name, value in used.items():
            limit = self.limits.get(name)
            if isinstance(limit, int | float) and limit > 0 and value >= limit:
                return True
        return False


@dataclass(frozen=True, kw_only=True)
class TokenRow:
    """Per-token uncertainty of one logged sample, for the heat map."""

    label: str
    """Which step and sample the row is."""
    values: list[float]
    """Per token: entropy in nats when logged (``token_entropy``), else surprisal ``-logprob``."""
    kind: str
    """``entropy`` or ``surprisal``."""
    group: str = ""
    """The step (``run/step``) the row belongs to: the heat map draws one section per step."""
    tokens: list[str] = field(default_factory=list)
    """The tokens' text, when logged (``token_text``)."""
    logprobs: list[float] = field(default_factory=list)
    """The tokens' logprobs, when logged."""
    top3: list[float] = field(default_factory=list)
    """The probability mass of the three most likely tokens at each position, when logged."""
    entropy_kind: str = ""
    """``full`` (the whole distribution's) or ``top<k>`` (estimated from k alternatives), for entropy."""
    accepted: bool = False
    """Whether the row is the candidate an ``accept`` verdict returned."""
    total: int = 0
    """Tokens the candidate had (more than ``values`` when the log capped them); 0: not said."""
    answer: str | None = None
    """The candidate's answer, when logged."""


@dataclass(kw_only=True)
class Analysis:
    """Everything an audit reports, gathered in one pass over one or more logs."""

    paths: list[str] = field(default_factory=list)
    """The logs read."""
    records: int = 0
    """Records decoded."""
    undecodable_lines: list[str] = field(default_factory=list)
    """``path:line`` of lines that were not JSON objects (also a chain failure)."""
    invalid_records: list[str] = field(default_factory=list)
    """``path:line: field ...: problem`` of records skipped for a field of the wrong type."""
    verdict_records: int = 0
    """Verdict records."""
    summary_records: int = 0
    """Summary records."""
    repair_records: int = 0
    """Repair records (a writer cut a torn line)."""
    runs: set[str] = field(default_factory=set)
    """Run ids seen."""
    steps: dict[tuple[str, str], StepOutcome] = field(default_factory=dict)
    """Every step, by ``(run_id, step_id)``, in first-seen order."""
    actions: Counter[str] = field(default_factory=Counter)
    """Verdicts by action."""
    error_classes: Counter[str] = field(default_factory=Counter)
    """Verdicts by the error class that led to them."""
    transitions: Counter[tuple[str, str]] = field(default_factory=Counter)
    """Verdict flow: ``(from, to)`` counts, ``from`` being ``start`` for a step's first verdict."""
    confidence_hist: list[int] = field(default_factory=lambda: [0] * CONFIDENCE_BINS)
    """Verdict confidences in :data:`CONFIDENCE_BINS` equal bins over [0, 1]."""
    target_samples: Counter[str] = field(default_factory=Counter)
    """Samples charged to each model or tool."""
    target_usd: Counter[str] = field(default_factory=Counter)
    """USD charged to each model or tool."""
    target_attempts: Counter[str] = field(default_factory=Counter)
    """Attempts made on each model or tool: what the records charged (``budget.charged``), or one per
    verdict for records that do not say."""
    target_input_tokens: Counter[str] = field(default_factory=Counter)
    """Input tokens charged to each model or tool."""
    target_output_tokens: Counter[str] = field(default_factory=Counter)
    """Output tokens charged to each model or tool."""
    tools: set[str] = field(default_factory=set)
    """Targets seen as tools (their verdicts summarise a tool call)."""
    accepts: Counter[tuple[str, str, bool]] = field(default_factory=Counter)
    """``accept`` verdicts by ``(step id, target, checked)``: how many no check ran on (the record's
    ``checked`` is false), per step and per model or tool."""
    token_rows: list[TokenRow] = field(default_factory=list)
    """Per-token rows for the heat map (the first :data:`MAX_TOKEN_ROWS` logged)."""


def attempt_label(attempt: int, target: str) -> str:
    """A verdict's heat-map row label: its attempt and the member or tool that made the candidate
    (``attempt 2 · calculator``), a long model name cut so that the label fits its column."""
    short = target if len(target) <= 16 else target[:15] + "…"
    return f"attempt {attempt} · {short}" if short else f"attempt {attempt}"


def add_token_rows(out: Analysis, label: str, holder: dict[str, Any], group: str = "") -> None:
    """Keep per-token data from ``holder`` for the heat map: a verdict's ``token_samples`` (one row
    per logged candidate), else ``token_entropy`` or ``token_logprobs`` (one row)."""
    if len(out.token_rows) >= MAX_TOKEN_ROWS:
        return
    samples = holder.get("token_samples")
    if isinstance(samples, list):
        for item in samples:
            if isinstance(item, dict):
                sample = item.get("sample")
                add_token_rows(out, f"{label} · s{sample}" if isinstance(sample, int) else label, item, group)
        return
    row = token_row(label, holder, group)
    if row is not None:
        out.token_rows.append(row)


def token_row(label: str, holder: dict[str, Any], group: str = "") -> TokenRow | None:
    """The heat-map row of one logged candidate or bank sample (``token_entropy``, else surprisal from
    ``token_logprobs``), or ``None`` when it carries neither."""
    entropy = holder.get("token_entropy")
    logprobs = holder.get("token_logprobs")
    if _floats(entropy):
        values, kind = [float(v) for v in entropy], "entropy"
    elif _floats(logprobs):
        values, kind = [-float(v) for v in logprobs], "surprisal"
    else:
        return None
    text = holder.get("token_text")
    top3 = holder.get("token_top3")
    total = holder.get("tokens_total")
    answer = holder.get("answer")
    return TokenRow(
        label=label,
        values=values,
        kind=kind,
        group=group,
        tokens=[str(t) for t in text] if isinstance(text, list) else [],
        logprobs=[float(v) for v in logprobs] if _floats(logprobs) else [],
        top3=[float(v) for v in top3] if _floats(top3) else [],
        entropy_kind=str(holder.get("entropy_kind") or "") if kind == "entropy" else "",
        accepted=holder.get("accepted") is True,
        total=total if isinstance(total, int) and not isinstance(total, bool) else 0,
        answer=str(answer) if answer is not None else None,
    )


def _floats(value: Any) -> TypeGuard[list[Any]]:
    return (
        isinstance(value, list)
        and bool(value)
        and all(isinstance(v, int | float) and not isinstance(v, bool) for v in value)
    )


@contextmanager
def no_cyclic_gc() -> Iterator[None]:
    """Pause the cyclic garbage collector while building large acyclic structures.

    The fold allocates a few objects per step and the decoder a few dicts per record; the collector
    would rescan the growing heap again and again, for no garbage (nothing here is cyclic).
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
