"""The costs a fold charges to each model or tool, kept in file order until they are added up.

:mod:`retryctl.report._fold` charges what each verdict's attempt spent (samples, USD, input and
output tokens) to its target. The typed fold keeps the charges as per-target lists (:class:`Pending`)
and adds them to the totals one after the other at the end of a batch (:func:`add_charges`), which
gives the same float sums as the reference fold's ``+=`` per record; a worker process hands its lists
over to be added after the first part's (:mod:`retryctl.report._handover`).
"""

from __future__ import annotations

from collections import Counter
from functools import reduce
from operator import add
from typing import Any

from retryctl.report._model import Analysis, StepOutcome
from retryctl.report._structs import Used

__all__ = ["Pending", "add_charges", "charge"]


class Pending:
    """The costs a fold charged to each target, in file order, not yet added to the totals."""

    __slots__ = ("floats", "input_tokens", "mixed", "output_tokens", "samples", "strings", "usd")

    def __init__(self) -> None:
        self.samples: dict[Any, list[Any]] = {}
        """Samples charged, per target, in file order."""
        self.usd: dict[Any, list[Any]] = {}
        """USD charged, per target, in file order."""
        self.input_tokens: dict[Any, list[Any]] = {}
        """Input tokens charged, per target, in file order."""
        self.output_tokens: dict[Any, list[Any]] = {}
        """Output tokens charged, per target, in file order."""
        self.mixed = False
        """Whether a dict record was folded (what was pending was applied before it)."""
        self.strings: dict[str, str] = {}
        """One object per distinct string value kept in a step (bounded: see ``retryctl.report._fold``)."""
        self.floats: dict[float, float] = {}
        """One object per distinct positive float kept in a step (positive: ``-0.0 == 0.0``)."""

    def apply(self, out: Analysis) -> None:
        """Add the pending charges to ``out``'s totals and start empty."""
        add_charges(out.target_samples, self.samples)
        add_charges(out.target_usd, self.usd)
        add_charges(out.target_input_tokens, self.input_tokens)
        add_charges(out.target_output_tokens, self.output_tokens)
        self.samples.clear()  # in place: a fold in progress holds these dicts
        self.usd.clear()
        self.input_tokens.clear()
        self.output_tokens.clear()


def add_charges(totals: Counter[Any], charges: dict[Any, list[Any]]) -> None:
    """``totals[t] += c`` for each charge ``c`` of each target, in order (the same float sums)."""
    for target, cs in charges.items():
        totals[target] = reduce(add, cs, totals.get(target, 0))


def charge(step: StepOutcome, charged: Used, target: Any, columns: tuple[Any, Any, Any, Any]) -> None:
    """Add what an attempt charged to its step and, pending, to its target (its attempts are counted
    by the caller)."""
    p_samples, p_usd, p_in, p_out = columns
    d = charged.samples
    if d > 0:
        step.samples = step.samples + d
        try:
            p_samples[target].append(d)
        except KeyError:
            p_samples[target] = [d]
    d = charged.usd
    if d > 0:
        step.usd = step.usd + d
        try:
            p_usd[target].append(d)
        except KeyError:
            p_usd[target] = [d]
    d = charged.input_tokens
    if d > 0:
        try:
            p_in[target].append(d)
        except KeyError:
            p_in[target] = [d]
    d = charged.output_tokens
    if d > 0:
        try:
            p_out[target].append(d)
        except KeyError:
            p_out[target] = [d]
