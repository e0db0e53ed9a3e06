"""What the worker of a two-process audit hands over to this process, and how the two are joined.

The worker (:mod:`retryctl.report._audit`) folds the second part of a log into its own
:class:`~retryctl.report._model.Analysis` and writes the result to a pipe: its record-level counts,
its chain check and its pending charges pickled, then its steps as msgpack arrays (quick both ways)
or, when only the summary is wanted, just their totals (:class:`~retryctl.report._totals.StepTotals`)
and ids. This process adds that fold after its own (:func:`merge`): counts and counters add up, the
second part's steps follow the first part's, and the charges are added one by one after the first
part's (:meth:`~retryctl.report._fold.Pending.apply`), which gives the same float sums as one pass.
"""

from __future__ import annotations

import pickle

import msgspec

from retryctl.report._charges import Pending
from retryctl.report._model import MAX_TOKEN_ROWS, Analysis, StepOutcome
from retryctl.report._scan import Part
from retryctl.report._totals import StepTotals

__all__ = ["merge", "pack", "unpack", "unpack_steps", "unpack_totals"]


class _TotalsOut(msgspec.Struct, array_like=True, gc=False):
    """What a worker that totals its steps hands over besides its record-level counts."""

    totals: StepTotals
    step_ids: dict[str, list[str]]
    """Its steps' ids by run, to check that the parts share no step."""


class _TotalsIn(msgspec.Struct, array_like=True, gc=False):
    totals: StepTotals
    step_ids: dict[str, msgspec.Raw]
    """Decoded only for the runs both parts have (usually one, where the log was cut)."""


def pack(out: Analysis, part: Part, pending: Pending, *, totals: bool = False) -> bytes:
    """The worker's result: its steps as msgpack arrays, or with ``totals`` only their totals and
    ids; the rest pickled."""
    try:
        if not totals:
            tail = msgspec.msgpack.encode(list(out.steps.values()))
        elif pending.mixed:
            tail = b""  # the parent folds this part again, steps and all
        else:
            step_ids: dict[str, list[str]] = {}
            for run_id, step_id in out.steps:
                ids = step_ids.get(run_id)
                if ids is None:
                    step_ids[run_id] = [step_id]
                else:
                    ids.append(step_id)
            tail = msgspec.msgpack.encode(_TotalsOut(StepTotals.of(out.steps.values()), step_ids))
    except (TypeError, OverflowError):  # a value msgpack cannot carry: the parent folds the part again
        tail = b""
    # The steps travel in the tail; they are put back rather than dropped, because freeing a few
    # hundred thousand objects takes a tenth of a second, and the worker exits without freeing.
    steps, out.steps = out.steps, {}
    charges = (pending.samples, pending.usd, pending.input_tokens, pending.output_tokens)
    rest = pickle.dumps((out, part, charges, pending.mixed), pickle.HIGHEST_PROTOCOL)
    out.steps = steps
    return len(rest).to_bytes(8, "little") + rest + tail


_steps_decode = msgspec.msgpack.Decoder(list[StepOutcome]).decode
_totals_decode = msgspec.msgpack.Decoder(_TotalsIn).decode
_ids_decode = msgspec.msgpack.Decoder(list[str]).decode


def unpack(payload: bytes) -> tuple[Analysis, Part, Pending, bytes]:
    """The worker's counts, chain check and charges; and the tail (steps or totals) still encoded."""
    size = int.from_bytes(payload[:8], "little")
    out, part, charges, mixed = pickle.loads(payload[8 : 8 + size])
    pending = Pending()
    pending.samples, pending.usd, pending.input_tokens, pending.output_tokens = charges
    pending.mixed = mixed
    return out, part, pending, payload[8 + size :]


def unpack_steps(out: Analysis, pending: Pending, tail: bytes) -> None:
    """Put the worker's steps into ``out``; a tail that does not decode marks the part to fold again."""
    try:
        steps = _steps_decode(tail)
    except msgspec.DecodeError:  # a value of an odd type, folded from a dict: fold the part again
        pending.mixed = True
        steps = []
    out.steps = {(s.run_id, s.step_id): s for s in steps}


def unpack_totals(tail: bytes, first: Analysis) -> StepTotals | None:
    """The worker's totals, or ``None`` when they cannot be added to ``first``'s (a step in both parts,
    or nothing handed over): the part must then be folded again here."""
    try:
        got = _totals_decode(tail)
    except msgspec.DecodeError:
        return None
    steps = first.steps
    for run_id in got.step_ids.keys() & first.runs:
        if any((run_id, step_id) in steps for step_id in _ids_decode(got.step_ids[run_id])):
            return None
    return got.totals


def merge(out: Analysis, second: Analysis, pending: Pending) -> None:
    """Add the second part's fold to the first's (their steps are disjoint)."""
    out.records += second.records
    out.verdict_records += second.verdict_records
    out.summary_records += second.summary_records
    out.repair_records += second.repair_records
    out.runs |= second.runs
    out.steps.update(second.steps)
    out.actions.update(second.actions)
    out.error_classes.update(second.error_classes)
    out.transitions.update(second.transitions)
    out.target_attempts.update(second.target_attempts)
    out.tools |= second.tools
    out.accepts.update(second.accepts)
    out.confidence_hist = [a + b for a, b in zip(out.confidence_hist, second.confidence_hist, strict=True)]
    pending.apply(out)
    room = max(0, MAX_TOKEN_ROWS - len(out.token_rows))
    out.token_rows.extend(second.token_rows[:room])
