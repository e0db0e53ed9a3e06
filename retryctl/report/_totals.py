"""What the audit's sections need from the steps, gathered so that two halves of a log add up exactly.

:func:`retryctl.report.summarise` reads every step several ways (counts by outcome, sums by step id,
the spend ranking for black holes, threshold bands, accuracy). :class:`StepTotals` gathers all of it
in one pass over a run of steps, and :meth:`StepTotals.extend` appends the totals of the steps that
follow: the result is the one a single pass over both runs gives. That lets the two processes of
:func:`retryctl.report.audit_summary` each total their own half of a large log side by side, and hand
over a few counters and number lists instead of a few hundred thousand steps.

Exactness: counts add up, and dicts keep first-seen order and first-seen keys (``5`` and ``5.0`` are
one key) when the later totals are added after the earlier ones. Float sums depend on the order of
the additions, so the values summed are kept as lists in step order and summed (by ``sum`` or by a
running total, as the sections always did) only when the sections are built; the top-ten rankings
are merged from each half's own top ten (a global top-ten entry is in its half's top ten).
``tests/report/test_totals.py`` checks every section against the previous one-pass implementation,
split at every step.
"""

from __future__ import annotations

import heapq
import re
from collections import Counter
from collections.abc import Iterable
from functools import reduce
from operator import add
from typing import Any

import msgspec

from retryctl._answers import answers_agree
from retryctl.report._model import StepOutcome

__all__ = ["HINT_WIDTH", "TOP", "Hole", "StepTotals", "budget_of", "reason_shape", "running_total"]

_NUMBER = re.compile(r"\d+(?:\.\d+)?")
# Step, tool and model names are blanked; a budget's name is kept: "step '…' budget 'usd' is spent
# (# of #)" and "step '…' budget 'samples' ..." are different reasons, each a row of its own. One
# pass over both kinds, so that a budget name's closing quote never opens a blanked name.
_QUOTED = re.compile(r"(\bbudget '[^']*')|'[^']*'")
_BUDGET = re.compile(r"\bbudget '([^']*)'")


def _blank(found: re.Match[str]) -> str:
    return found.group(1) or "'…'"


TOP = 10
"""Rows kept in the top lists (stop reasons, black holes)."""
HINT_WIDTH = 0.05
"""Width of a "stalled just under the threshold" band."""


def reason_shape(reason: str) -> str:
    """A stop reason with its numbers and quoted names blanked, so that like reasons count together.

    The name of a budget (``budget 'usd'``) is kept: each budget that stopped steps is a row of its own.
    """
    return _NUMBER.sub("#", _QUOTED.sub(_blank, reason))


def budget_of(shape: str) -> str | None:
    """The budget a reason (or its shape) names, ``None`` for a reason that is not about a budget."""
    found = _BUDGET.search(shape)
    return None if found is None else found.group(1)


def running_total(values: list[Any]) -> Any:
    """``0 + v1 + v2 + ...``, in order: what adding each value to a running total gives (``sum`` may
    round otherwise: Python 3.12 and later compensate the rounding errors of float sums)."""
    return reduce(add, values, 0)


class Hole(msgspec.Struct, array_like=True, gc=False):
    """A step that may rank among the black holes: unaccepted, with a positive spend."""

    spent: int | float
    run_id: str
    step_id: str
    attempts: int | float
    outcome: str | None
    reason: str


class StepTotals(msgspec.Struct, gc=False):
    """The totals of a run of steps (see the module docstring); a ``msgspec`` struct, to travel as msgpack."""

    steps: int = 0
    """Steps totalled."""
    by_usd: bool = False
    """Whether some step spent USD (black holes then rank by USD, else by samples)."""
    outcomes: dict[str, int] = msgspec.field(default_factory=dict)
    """Steps by last action (``summary only`` without a verdict), first-seen order."""
    shapes: dict[str, list[Any]] = msgspec.field(default_factory=dict)
    """Stopped or asking steps by reason shape: ``[steps, first reason]``."""
    groups: dict[str, list[Any]] = msgspec.field(default_factory=dict)
    """By step id: ``[steps, accepted, [samples...], max samples, [attempts...], verdicts, [usd...]]``."""
    samples: list[Any] = msgspec.field(default_factory=list)
    """Each step's samples, in step order."""
    usd: list[Any] = msgspec.field(default_factory=list)
    """Each step's USD, in step order."""
    accepted: list[bool] = msgspec.field(default_factory=list)
    """Whether each step ended in ``accept``, in step order."""
    top_samples: list[Hole] = msgspec.field(default_factory=list)
    """The ten unaccepted steps that spent the most samples (ties: first step first)."""
    top_usd: list[Hole] = msgspec.field(default_factory=list)
    """Likewise by USD."""
    bands: list[list[Any]] = msgspec.field(default_factory=list)
    """Threshold bands, first-seen order: ``[threshold, low, high, steps, graded, correct]``."""
    graded: list[bool] = msgspec.field(default_factory=list)
    """Whether each step with a gold answer got it right, in step order."""
    accepted_graded: list[bool] = msgspec.field(default_factory=list)
    """Likewise for the graded steps that ended in ``accept``."""
    accepted_confidence: list[float] = msgspec.field(default_factory=list)
    """The last confidence of each of those steps (0 when none was given), for the reliability diagram."""
    graded_confidence: list[float] = msgspec.field(default_factory=list)
    """The last confidence of each graded step, accepted or not (0 when none was given): Brier, AUROC."""
    graded_samples: list[Any] = msgspec.field(default_factory=list)
    """Samples of each graded step, in step order."""
    graded_usd: list[Any] = msgspec.field(default_factory=list)
    """USD of each graded step, in step order."""
    by_samples: list[list[Any]] = msgspec.field(default_factory=list)
    """Graded steps by samples used: ``[samples, steps, correct]``, first-seen order."""
    samples_hist: list[list[Any]] = msgspec.field(default_factory=list)
    """Steps by samples used: ``[samples, steps]``, first-seen order."""

    @classmethod
    def of(cls, steps: Iterable[StepOutcome]) -> StepTotals:  # noqa: PLR0915 - one pass, inlined on purpose
        """The totals of ``steps``, in their order."""
        shapes: dict[str, list[Any]] = {}
        shape_of: dict[str, str] = {}  # reasons repeat: blank each distinct one once
        groups: dict[str, list[Any]] = {}
        last_actions: list[str | None] = []
        samples: list[Any] = []
        usd: list[Any] = []
        bands: dict[tuple[Any, float, float], list[Any]] = {}
        memo: dict[tuple[Any, Any], bool] = {}  # answers and golds repeat across runs of one task set
        graded: list[bool] = []
        accepted_graded: list[bool] = []
        accepted_confidence: list[float] = []
        graded_confidence: list[float] = []
        graded_samples: list[Any] = []
        graded_usd: list[Any] = []
        by_samples: dict[Any, list[Any]] = {}
        unaccepted: list[StepOutcome] = []
        actions_append, samples_append, usd_append = last_actions.append, samples.append, usd.append
        for s in steps:
            action = s.last_action
            actions_append(action)
            x, u = s.samples, s.usd
            samples_append(x)
            usd_append(u)
            ok_accept = action == "accept"
            if not ok_accept:
                unaccepted.append(s)
                if action in ("stop", "ask_user"):
                    reason = s.last_reason
                    shape = shape_of.get(reason)
                    if shape is None:
                        shape = shape_of[reason] = reason_shape(reason)
                    row = shapes.get(shape)
                    if row is None:
                        shapes[shape] = [1, reason]
                    else:
                        row[0] += 1
            g = groups.get(s.step_id)
            if g is None:
                groups[s.step_id] = [1, int(ok_accept), [x], x, [s.attempts], s.verdicts, [u]]
            else:
                g[0] += 1
                g[1] += ok_accept
                g[2].append(x)
                g[3] = max(g[3], x)
                g[4].append(s.attempts)
                g[5] += s.verdicts
                g[6].append(u)
            gold = s.gold
            ok: bool | None = None
            if gold is not None:
                answer = s.answer
                if answer is None:
                    ok = False
                else:
                    known = memo.get((answer, gold))
                    ok = memo[(answer, gold)] = answers_agree(answer, gold) if known is None else known
                graded.append(ok)
                graded_confidence.append(float(s.last_confidence or 0.0))
                if ok_accept:
                    accepted_graded.append(ok)
                    accepted_confidence.append(float(s.last_confidence or 0.0))
                graded_samples.append(x)
                graded_usd.append(u)
                row = by_samples.get(x)
                if row is None:
                    by_samples[x] = [x, 1, int(ok)]
                else:
                    row[1] += 1
                    row[2] += ok
            if ok_accept:
                continue
            t, c = s.threshold, s.last_confidence
            if t is not None and c is not None and t - 2 * HINT_WIDTH <= c < t:
                low = round(t - HINT_WIDTH, 4) if c >= t - HINT_WIDTH else round(t - 2 * HINT_WIDTH, 4)
                high = round(low + HINT_WIDTH, 4)
                band = bands.get((t, low, high))
                if band is None:
                    band = bands[(t, low, high)] = [t, low, high, 0, 0, 0]
                band[3] += 1
                if ok is not None:
                    band[4] += 1
                    band[5] += ok
        # Counted in C, in first-seen order (which Counter keeps), keys as first seen.
        outcomes: dict[str, int] = {}
        for action, n in Counter(last_actions).items():
            outcome = action or "summary only"
            outcomes[outcome] = outcomes.get(outcome, 0) + n
        by_usd = any(u > 0 for u in usd)
        return cls(
            steps=len(samples),
            by_usd=by_usd,
            outcomes=outcomes,
            shapes=shapes,
            groups=groups,
            samples=samples,
            usd=usd,
            accepted=[a == "accept" for a in last_actions],
            top_samples=_top(unaccepted, by_usd=False),
            top_usd=_top(unaccepted, by_usd=True),
            bands=list(bands.values()),
            graded=graded,
            accepted_graded=accepted_graded,
            accepted_confidence=accepted_confidence,
            graded_confidence=graded_confidence,
            graded_samples=graded_samples,
            graded_usd=graded_usd,
            by_samples=list(by_samples.values()),
            samples_hist=[[x, n] for x, n in Counter(samples).items()],
        )

    def extend(self, later: StepTotals) -> None:
        """Add the totals of the steps that follow this run's (``later`` is left as it was)."""
        self.steps += later.steps
        self.by_usd = self.by_usd or later.by_usd
        for k, v in later.outcomes.items():
            self.outcomes[k] = self.outcomes.get(k, 0) + v
        for k, (count, example) in later.shapes.items():
            row = self.shapes.get(k)
            if row is None:
                self.shapes[k] = [count, example]
            else:
                row[0] += count
        for k, g in later.groups.items():
            mine = self.groups.get(k)
            if mine is None:
                self.groups[k] = [g[0], g[1], list(g[2]), g[3], list(g[4]), g[5], list(g[6])]
                continue
            mine[0] += g[0]
            mine[1] += g[1]
            mine[2].extend(g[2])
            mine[3] = max(mine[3], g[3])
            mine[4].extend(g[4])
            mine[5] += g[5]
            mine[6].extend(g[6])
        self.samples.extend(later.samples)
        self.usd.extend(later.usd)
        self.accepted.extend(later.accepted)
        self.top_samples = _merge_top(self.top_samples, later.top_samples)
        self.top_usd = _merge_top(self.top_usd, later.top_usd)
        _add_rows(self.bands, later.bands, key=3, width=3)
        self.graded.extend(later.graded)
        self.accepted_graded.extend(later.accepted_graded)
        self.accepted_confidence.extend(later.accepted_confidence)
        self.graded_confidence.extend(later.graded_confidence)
        self.graded_samples.extend(later.graded_samples)
        self.graded_usd.extend(later.graded_usd)
        _add_rows(self.by_samples, later.by_samples, key=1, width=2)
        _add_rows(self.samples_hist, later.samples_hist, key=1, width=1)


def _top(unaccepted: list[StepOutcome], *, by_usd: bool) -> list[Hole]:
    """The ten biggest spenders with a positive spend, ranked as a stable sort by spend would rank them."""
    spend = "usd" if by_usd else "samples"
    ranked = heapq.nsmallest(
        TOP, (s for s in unaccepted if getattr(s, spend) > 0), key=lambda s: -getattr(s, spend)
    )
    return [
        Hole(getattr(s, spend), s.run_id, s.step_id, s.attempts, s.last_action, s.last_reason) for s in ranked
    ]


def _merge_top(earlier: list[Hole], later: list[Hole]) -> list[Hole]:
    return heapq.nsmallest(TOP, earlier + later, key=lambda h: -h.spent)


def _add_rows(rows: list[list[Any]], later: list[list[Any]], *, key: int, width: int) -> None:
    """Add ``later``'s rows to ``rows``: rows are keyed by their first ``key`` cells, and the next
    ``width`` cells are counts; a new key is appended (first-seen order, first-seen key objects)."""
    index = {tuple(r[:key]): r for r in rows}
    for r in later:
        mine = index.get(tuple(r[:key]))
        if mine is None:
            mine = list(r)
            rows.append(mine)
            index[tuple(r[:key])] = mine
            continue
        for i in range(key, key + width):
            mine[i] += r[i]
