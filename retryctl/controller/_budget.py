"""Budgets (the limits of a run or a step) and usage (what a call costs), as frozen data.

The seven quantities share one name list, :data:`LIMIT_NAMES`, used as the keys of every ledger snapshot
and of the verdict's ``budget_used``/``budget_limit`` evidence.
"""

from __future__ import annotations

from typing import Final

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["LIMIT_NAMES", "Budget", "Usage"]

LIMIT_NAMES: Final[tuple[str, ...]] = (
    "attempts",
    "samples",
    "input_tokens",
    "output_tokens",
    "usd",
    "transport_retries",
    "wall_s",
)
"""The names of the quantities a budget limits, in the order snapshots list them."""

ADDITIVE_NAMES: Final[tuple[str, ...]] = LIMIT_NAMES[:-1]
"""The quantities that calls add up; wall time is measured by the ledger's clock instead."""

COUNT_NAMES: Final[frozenset[str]] = frozenset(
    {"attempts", "samples", "input_tokens", "output_tokens", "transport_retries"}
)
"""The quantities counted in whole units (the others, ``usd`` and ``wall_s``, are fractional)."""

_MODEL_CONFIG = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False, use_attribute_docstrings=True)


class Budget(BaseModel):
    """The limits of a run or of a step. ``None`` turns a limit off; every limit is off by default.

    A negative value is a :class:`pydantic.ValidationError` that names the field.
    """

    model_config = _MODEL_CONFIG

    attempts: int | None = Field(default=None, ge=0)
    """Calls started (each reservation usually counts one): model calls, tool calls, retries."""
    samples: int | None = Field(default=None, ge=0)
    """Candidates drawn from a model (``n`` samples in one call count ``n``)."""
    input_tokens: int | None = Field(default=None, ge=0)
    """Prompt tokens sent, summed over calls."""
    output_tokens: int | None = Field(default=None, ge=0)
    """Completion tokens received (or reserved as ``max_tokens``), summed over calls."""
    usd: float | None = Field(default=None, ge=0)
    """Money spent in US dollars, from a :class:`~retryctl.controller.PriceTable`."""
    transport_retries: int | None = Field(default=None, ge=0)
    """Requests a model backend sent again after a transport fault (a 429, a 5xx, a timeout), inside
    one attempt: the HTTP tries beyond the first of each request. At the limit a backend gives the
    next retry up and its error goes to the controller, which decides (retry, switch, stop); ``0``
    turns a backend's own retrying off. Their time is wall time, limited by ``wall_s``."""
    wall_s: float | None = Field(default=None, ge=0)
    """Seconds of wall time since the ledger was opened, read from the ledger's injected clock."""

    def limits(self) -> dict[str, float | None]:
        """The limits by name (:data:`LIMIT_NAMES`), ``None`` where a limit is off."""
        return {name: getattr(self, name) for name in LIMIT_NAMES}


class Usage(BaseModel):
    """Amounts of the budgeted quantities: a call's estimate, its actual cost, or a total.

    ``wall_s`` in an *estimate* is the longest the call may take (e.g. its timeout): a reservation is
    refused when the elapsed time plus it would pass the wall limit. A ledger never adds ``wall_s`` up,
    because calls overlap in time; its clock measures the elapsed time instead.
    """

    model_config = _MODEL_CONFIG

    attempts: int = Field(default=0, ge=0)
    """Calls started."""
    samples: int = Field(default=0, ge=0)
    """Candidates drawn."""
    input_tokens: int = Field(default=0, ge=0)
    """Prompt tokens."""
    output_tokens: int = Field(default=0, ge=0)
    """Completion tokens (in an estimate: the call's ``max_tokens`` times its samples)."""
    usd: float = Field(default=0.0, ge=0)
    """US dollars."""
    transport_retries: int = Field(default=0, ge=0)
    """Requests sent again by a backend after a transport fault."""
    wall_s: float = Field(default=0.0, ge=0)
    """Seconds: in an estimate, the call's longest duration; in a snapshot, the elapsed time."""

    def amounts(self) -> dict[str, float]:
        """The amounts by name (:data:`LIMIT_NAMES`)."""
        return {name: getattr(self, name) for name in LIMIT_NAMES}

    def __add__(self, other: Usage) -> Usage:
        if not isinstance(other, Usage):
            return NotImplemented
        return Usage(**{n: getattr(self, n) + getattr(other, n) for n in LIMIT_NAMES})
