"""Typed, selective decoding of decision-log lines for the audit's fast path.

``msgspec`` decodes a line straight into the small structs below, reading only the fields the audit
uses and skipping the rest without building them (about 1 µs a line against 2.7 µs for a full
``orjson`` decode into dicts). The types are chosen so that whatever they accept folds exactly as the
plain dict does (:func:`retryctl.report._fold.fold_dicts`): a field is typed only as tightly as the fold reads
it, ``Any`` where the fold takes any value, and :data:`UNSET` marks a key that is absent where absence
and ``null`` differ; a field the record schema types (``attempt``, ``answer``, ``target``...) is typed
here as the schema types it, so that a line of the wrong types is never folded unchecked. A line they
do not accept (a value of an unexpected type, or not JSON at all) is decoded by ``orjson`` instead and,
once the record models accept it (:func:`retryctl.report._load.record_problem`), folded as a dict, so
the two paths agree line by line.

Known difference, on lines no JSON encoder writes: a number too large for a double in a field the
audit does not read is skipped here, while ``orjson`` rejects the whole line.
"""

from __future__ import annotations

from typing import Any, Literal

import msgspec
import orjson

__all__ = [
    "UNSET",
    "Budget",
    "Candidates",
    "Extra",
    "LeanBudget",
    "LeanExtra",
    "LeanRecord",
    "Record",
    "Thresholds",
    "Used",
    "decode_fallback",
    "decoder",
    "lean_decoder",
]

UNSET: Any = msgspec.UNSET
"""The value of a field whose key the line does not have."""

Action = Literal["accept", "refine", "retry", "switch", "ask_user", "stop"]
"""A verdict's action, as the record schema has it (``retryctl.controller.Action``)."""


class Used(msgspec.Struct, gc=False):
    """``budget.used`` (and ``budget.charged``) of a verdict, ``budget_used`` of a summary."""

    samples: int | float = 0.0
    usd: int | float = 0.0
    attempts: int | float = 0.0
    input_tokens: int | float = 0.0
    output_tokens: int | float = 0.0


class Thresholds(msgspec.Struct, gc=False):
    """A verdict's ``thresholds``: only ``accept`` is read."""

    accept: int | float = UNSET


class Candidates(msgspec.Struct, gc=False):
    """A verdict's ``candidates_summary``: only whether it has a ``tool`` key."""

    tool: Any = UNSET


class LeanBudget(msgspec.Struct, gc=False):
    """A verdict's ``budget`` when only the summary is wanted: the limits are not read."""

    used: Used | None = None
    scope: Literal["step", "run"] | None = None
    charged: Used | None = None


class Budget(LeanBudget, gc=False):
    """A verdict's ``budget``."""

    limit: dict[str, Any] | None = None


class LeanExtra(msgspec.Struct, gc=False):
    """``extra`` when only the summary is wanted: the gold answer (per-token data feeds only the HTML)."""

    gold: Any = UNSET


class Extra(LeanExtra, gc=False):
    """The keys of ``extra`` the audit reads (a gold answer, per-token data)."""

    token_entropy: Any = UNSET
    token_logprobs: Any = UNSET
    token_samples: Any = UNSET

    def as_dict(self) -> dict[str, Any]:
        """The keys present, as the plain path would see them."""
        return {k: v for k, v in msgspec.structs.asdict(self).items() if v is not UNSET}


class LeanRecord(msgspec.Struct, gc=False):
    """A log line as the fold reads it when only the summary is wanted: :class:`Record` without what
    only the HTML report and the step details read (the limits, the per-token data, the sampling
    history)."""

    kind: str = ""
    run_id: str = ""
    step_id: str = ""
    # verdicts
    action: Action = "?"  # type: ignore[assignment]  # a summary has none; the fold counts "?"
    confidence: int | float | None = None
    checked: bool = True  # absent in records written before the field: they claimed their checks
    reason: str = ""
    attempt: int = 0
    answer: str | None = None
    thresholds: Thresholds | None = None
    budget: LeanBudget | None = None
    target: str | None = None
    error_class: str | None = None
    extra: LeanExtra | None = None
    candidates_summary: Candidates | None = None
    # summaries
    final_answer: str | None = None
    budget_used: Used | None = None
    # the chain (retryctl.audit.check_chain reads these; any type is accepted so that analysis never
    # falls back on them)
    prev_hash: Any = None
    schema: Any = None
    hash: Any = None


class Record(LeanRecord, gc=False):
    """One log line, verdict or summary (or any other kind, counted only): every field the audit reads."""

    budget: Budget | None = None
    extra: Extra | None = None
    budget_max: dict[str, Any] | None = None
    sampling_history: list[Any] | None = None


decoder = msgspec.json.Decoder(Record)
"""Decodes one line into :class:`Record`."""

lean_decoder = msgspec.json.Decoder(LeanRecord)
"""Decodes one line into :class:`LeanRecord`."""


def decode_fallback(line: bytes) -> dict[str, Any] | None:
    """A line :data:`decoder` refused, as the plain path reads it: a dict, or ``None`` (not an object)."""
    try:
        obj = orjson.loads(line)
    except ValueError:
        return None
    return obj if isinstance(obj, dict) else None
