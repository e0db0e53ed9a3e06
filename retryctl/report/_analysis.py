"""One pass over a decision log: per-step outcomes and the totals every audit section is built from.

A *step* is one ``(run_id, step_id)`` pair: a question of a run, or a tool call. Its verdicts arrive
in file order. The ledger totals in ``budget.used`` are cumulative within a step, so the cost a
verdict's attempt added is the difference from the step's previous verdict; that difference is
charged to the attempt's ``target`` (the model or tool the attempt ran on), which gives
cost by model and tool. A step's outcome is its last verdict, completed by its summary record when
the run wrote one (``final_answer``, ``budget_max`` and, in ``extra.gold``, a gold answer).

The dict fold below (``_fold``) is the reference: it reads plain dicts. :func:`analyse` reads typed
records instead (:mod:`retryctl.report._structs`) and folds them with its fast twin
(:mod:`retryctl.report._fold`), which must agree with it exactly (``tests/report/test_fast.py``);
:func:`analyse_plain` keeps the reference path callable. Lines the typed decoder refuses still go
through ``_fold``.
"""

from __future__ import annotations

import gc
import os
from collections import Counter
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, TypeGuard

import msgspec

from retryctl.report._load import iter_raw_records

__all__ = [
    "CONFIDENCE_BINS",
    "Analysis",
    "StepOutcome",
    "TokenRow",
    "analyse",
    "analyse_records",
    "answers_match",
]

CONFIDENCE_BINS = 20
"""Bins of the confidence histogram over [0, 1]."""

_MAX_TOKEN_ROWS = 40  # rows kept for the per-token heat map; more would not be readable anyway


class StepOutcome(msgspec.Struct, array_like=True, gc=False):
    """How one step (``run_id``, ``step_id``) went, from its verdicts and its summary record.

    A ``msgspec`` struct (mutable, compared by value): a worker process hands its steps over as
    msgpack arrays (:mod:`retryctl.report._split`), and making a million of them is cheaper.
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
    """Highest attempt number."""
    samples: int | float = 0.0
    """Samples used (cumulative ledger total, or the summary's ``budget_used``)."""
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

    @property
    def accepted(self) -> bool:
        """Whether the step ended in ``accept``."""
        return self.last_action == "accept"

    @property
    def correct(self) -> bool | None:
        """Whether the answer matches the gold answer; ``None`` without gold."""
        if self.gold is None:
            return None
        return self.answer is not None and answers_match(self.answer, self.gold)

    @property
    def at_max_budget(self) -> bool:
        """Whether some limit of the step was used up."""
        used = {"samples": self.samples, "usd": self.usd}
        for name, value in used.items():
            limit = self.limits.get(name)
            if isinstance(limit, int | float) and limit > 0 and value >= limit:
                return True
        return False


def answers_match(answer: str, gold: str) -> bool:
    """Loose equality for accuracy: case and surrounding space ignored, numbers compared as numbers."""
    a, g = answer.strip().casefold(), gold.strip().casefold()
    if a == g:
        return True
    try:
        return float(a.replace(",", "")) == float(g.replace(",", ""))
    except ValueError:
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
    """Verdicts (attempts decided) per model or tool."""
    tools: set[str] = field(default_factory=set)
    """Targets seen as tools (their verdicts summarise a tool call)."""
    token_rows: list[TokenRow] = field(default_factory=list)
    """Per-token rows for the heat map (the first few logged)."""

    def add(self, rec: dict[str, Any]) -> None:
        """Fold one decoded record in (see :func:`analyse_records` for the loop that inlines this)."""
        analyse_records([rec], into=self)


def analyse(paths: Iterable[str | os.PathLike[str]]) -> Analysis:
    """Read every log in ``paths`` (in order) into one :class:`Analysis`.

    Lines are decoded selectively into typed records and folded by the fast twin of the loop below
    (:mod:`retryctl.report._fold`); :func:`analyse_plain` is the reference it must agree with.
    """
    from retryctl.report._split import fold_span  # imports this module

    result = Analysis()
    with no_cyclic_gc():
        for path in paths:
            name = os.fspath(path)
            result.paths.append(name)
            fold_span(name, 0, os.path.getsize(name), result)
    return result


def analyse_plain(paths: Iterable[str | os.PathLike[str]]) -> Analysis:
    """:func:`analyse` by the reference path: every line decoded to a dict and folded by ``_fold``."""
    result = Analysis()
    for path in paths:
        name = os.fspath(path)
        result.paths.append(name)
        skipped: list[int] = []
        invalid: list[tuple[int, str]] = []
        analyse_records(iter_raw_records(name, skipped, invalid), into=result)
        result.undecodable_lines.extend(f"{name}:{n}" for n in skipped)
        result.invalid_records.extend(f"{name}:{n}: {problem}" for n, problem in invalid)
    return result


def analyse_records(records: Iterable[dict[str, Any]], *, into: Analysis | None = None) -> Analysis:
    """Fold decoded records into ``into`` (a new :class:`Analysis` if ``None``) and return it."""
    out = Analysis() if into is None else into
    with no_cyclic_gc():
        _fold(records, out)
    return out


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


def _fold(records: Iterable[dict[str, Any]], out: Analysis) -> None:  # noqa: PLR0915 - one hot loop, inlined on purpose
    steps = out.steps
    runs = out.runs
    actions = out.actions
    transitions = out.transitions
    hist = out.confidence_hist
    t_samples, t_usd, t_attempts = out.target_samples, out.target_usd, out.target_attempts
    last_bin = CONFIDENCE_BINS - 1
    n = verdicts = summaries = repairs = 0
    for rec in records:
        n += 1
        get = rec.get
        kind = get("kind")
        if kind == "verdict":
            verdicts += 1
            run_id = get("run_id", "")
            key = (run_id, get("step_id", ""))
            step = steps.get(key)
            if step is None:
                step = steps[key] = StepOutcome(*key)
                runs.add(run_id)
            action = get("action", "?")
            actions[action] += 1
            transitions[(step.last_action or "start", action)] += 1
            step.actions.append(action)
            step.verdicts += 1
            step.last_action = action
            confidence = get("confidence")
            step.last_confidence = confidence
            if confidence is not None:
                b = int(confidence * CONFIDENCE_BINS)
                hist[b if b < last_bin else last_bin] += 1
            step.last_reason = get("reason", "")
            attempt = get("attempt", 0)
            step.attempts = max(step.attempts, attempt)
            answer = get("answer")
            if answer is not None and not step.has_summary:
                step.answer = answer
            thresholds = get("thresholds")
            if thresholds:
                step.threshold = thresholds.get("accept", step.threshold)
            budget = get("budget") or {}
            used = budget.get("used") or {}
            samples = used.get("samples", 0.0)
            usd = used.get("usd", 0.0)
            step.limits = budget.get("limit") or step.limits
            extra = get("extra") or {}
            target = get("target") or "(none)"
            d_samples = samples - step.samples
            d_usd = usd - step.usd
            if d_samples > 0:
                t_samples[target] += d_samples
                step.samples = samples
            if d_usd > 0:
                t_usd[target] += d_usd
                step.usd = usd
            t_attempts[target] += 1
            error_class = get("error_class")
            if error_class is not None:
                out.error_classes[error_class] += 1
            summary = get("candidates_summary")
            if isinstance(summary, dict) and "tool" in summary:
                out.tools.add(target)
            if extra:
                if "gold" in extra:
                    step.gold = str(extra["gold"])
                _token_rows(out, f"{key[0]}/{key[1]} #{attempt}", extra)
        elif kind == "summary":
            summaries += 1
            _fold_summary(out, rec)
        elif kind == "repair":
            repairs += 1
    out.records += n
    out.verdict_records += verdicts
    out.summary_records += summaries
    out.repair_records += repairs


def _fold_summary(out: Analysis, rec: dict[str, Any]) -> None:
    run_id = rec.get("run_id", "")
    key = (run_id, rec.get("step_id", ""))
    step = out.steps.get(key)
    if step is None:
        step = out.steps[key] = StepOutcome(*key)
        out.runs.add(run_id)
    step.has_summary = True
    step.answer = rec.get("final_answer")
    used = rec.get("budget_used") or {}
    step.samples = max(step.samples, float(used.get("samples", 0.0)))
    step.usd = max(step.usd, float(used.get("usd", 0.0)))
    step.limits = rec.get("budget_max") or step.limits
    extra = rec.get("extra") or {}
    if "gold" in extra:
        step.gold = str(extra["gold"])
    _token_rows(out, f"{key[0]}/{key[1]} summary", extra)
    for i, item in enumerate(rec.get("sampling_history") or []):
        if isinstance(item, dict):
            _token_rows(out, f"{key[0]}/{key[1]} sample {i + 1}", item)


def _token_rows(out: Analysis, label: str, holder: dict[str, Any]) -> None:
    """Keep per-token data from ``holder`` (``token_entropy`` or ``token_logprobs``) for the heat map."""
    if len(out.token_rows) >= _MAX_TOKEN_ROWS:
        return
    entropy = holder.get("token_entropy")
    if _floats(entropy):
        out.token_rows.append(TokenRow(label=label, values=[float(v) for v in entropy], kind="entropy"))
        return
    logprobs = holder.get("token_logprobs")
    if _floats(logprobs):
        out.token_rows.append(TokenRow(label=label, values=[-float(v) for v in logprobs], kind="surprisal"))


def _floats(value: Any) -> TypeGuard[list[Any]]:
    return (
        isinstance(value, list)
        and bool(value)
        and all(isinstance(v, int | float) and not isinstance(v, bool) for v in value)
    )
