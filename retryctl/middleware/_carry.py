"""What of a run's spend outlives the process that spent it, so a resumed run cannot start its budget
again from zero.

A run's :class:`~retryctl.controller.Ledger` lives in the memory of one process (``_runs.RunBook``).
A run paused at ``ask_user`` may be resumed from its checkpoint in another process, and a book that
holds many runs forgets the oldest; either way the run is met again without its ledger. So the spend
is also written where it lasts, as a :class:`RunRecord`:

- **in the agent state**, under the private key ``retryctl_run`` (checkpoints keep it): every model
  call writes the run's record as part of the model node's update (``ExtendedModelResponse``). That
  record includes the tool calls of the turns before it.
- **in the tool journal**, under ``retryctl.run/<run id>``, when a hook is left by an interrupt: a
  node that interrupts writes nothing to the state, so what its calls spent before the question
  (the tool attempt whose result is asked about, the model attempts before a model call asks) would
  be lost. Until the next model call, each tool call of the run that ends writes it again (parallel
  tool calls are tasks of one step; a sibling that ends after the question is kept by the
  checkpoint, and not run again, so its spend must be kept too). It lasts as long as the journal:
  a :class:`~retryctl.nodes.SQLiteToolJournal` across processes, the default
  :class:`~retryctl.nodes.MemoryToolJournal` within this one.

A run met without its ledger gets a new one seeded with the larger of the two records, name by name
(both only grow within a run): each carried total is committed on it (``Ledger.carry``, as
``ControlledStep`` rebuilds its ledger from its state); the limits are the middleware's ``budget``
plus what a person's ``extend`` replies added; the elapsed wall time goes on from the carried
seconds (a clock offset). A carried total above a limit (a budget made smaller between the two
processes) is carried as the limit: the run is spent.

Carried: the committed totals of every limit (:data:`~retryctl.controller.LIMIT_NAMES`: attempts,
samples, input and output tokens, USD, transport retries, and ``wall_s`` as elapsed seconds), the
``extend`` grants, and the run's model and tool call counts, as of the last write.

Not carried:

- **the time between the pause and the resume** in another process: ``wall_s`` counts the seconds
  the run spent in processes (a resume in the same process keeps one clock, so the wait counts there);
- **calls after the last write that no interrupt ended**: the tool calls of a turn whose node
  crashed or raised (LangGraph runs the node again on recovery, and its calls are charged as they
  run, but what they spent before is not counted), and the tool calls of a run's last turn (the run
  ends there);
- with a ``MemoryToolJournal``, on a resume in another process: what the interrupted node spent
  before its question (the state holds the spend up to the model call before that node). The
  journal that would serve those calls' results is gone with it, so the node runs them again, and
  they are charged again as they run: the work is done twice, the budget still counts it;
- reservations held by calls still running, the breaker's state (it has its own store), and the
  ``Run.views`` (rebuilt from the middleware's settings).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any, NotRequired, TypedDict

from retryctl.controller import LIMIT_NAMES, Budget, Clock, Ledger, Usage
from retryctl.controller._budget import COUNT_NAMES
from retryctl.controller._clock import ShiftedClock
from retryctl.exceptions import ConfigError

__all__ = ["RunRecord", "Spend", "anchor_of", "journal_key", "read_record", "seeded_ledger", "spend_of"]

_WHERE = "state['retryctl_run']"


class RunRecord(TypedDict):
    """The durable record of a run in progress (the value of ``state["retryctl_run"]``)."""

    id: str
    """The run's id (its ledger's key in the book)."""
    anchor: NotRequired[str]
    """The id of the user message the run answers: a record whose anchor is not the state's latest
    user message is an earlier run's (records of versions before it have none; see ``_runs``)."""
    used: NotRequired[dict[str, float]]
    """The ledger's committed totals by limit name; ``wall_s`` the seconds elapsed."""
    extended: NotRequired[dict[str, float]]
    """What ``extend`` replies added to each limit (only the limits that grew)."""
    model_calls: NotRequired[int]
    tool_calls: NotRequired[int]


@dataclass(frozen=True)
class Spend:
    """What a run spent, as carried to a ledger that did not see it (see the module docstring)."""

    used: dict[str, float] = field(default_factory=dict)
    extended: dict[str, float] = field(default_factory=dict)
    model_calls: int = 0
    tool_calls: int = 0

    def merged(self, other: Spend | None) -> Spend:
        """The larger of the two, name by name (a run's totals only grow)."""
        if other is None:
            return self
        return Spend(
            used=_max(self.used, other.used),
            extended=_max(self.extended, other.extended),
            model_calls=max(self.model_calls, other.model_calls),
            tool_calls=max(self.tool_calls, other.tool_calls),
        )

    def record(self, run_id: str, anchor: str | None = None) -> RunRecord:
        """This spend as the record of the run ``run_id``, answering the user message ``anchor``."""
        record: RunRecord = {"id": run_id}
        if anchor is not None:
            record["anchor"] = anchor
        record["used"] = dict(self.used)
        record["extended"] = dict(self.extended)
        record["model_calls"] = self.model_calls
        record["tool_calls"] = self.tool_calls
        return record


def _max(a: Mapping[str, float], b: Mapping[str, float]) -> dict[str, float]:
    return {n: max(a.get(n, 0.0), b.get(n, 0.0)) for n in LIMIT_NAMES if n in a or n in b}


def journal_key(run_id: str) -> str:
    """The tool-journal key of a run's record (run ids are drawn uuids: no tool call's key is one)."""
    return f"retryctl.run/{run_id}"


def read_record(value: object, where: str = _WHERE) -> tuple[str | None, Spend | None]:
    """The run id and spend in a record; a bare string is the id as older versions wrote it (no
    spend). Anything else is an error naming the field: a record is retryctl's own, so a malformed
    one is a checkpoint that was edited or corrupted, and a guess would let a budget leak."""
    if value is None:
        return None, None
    if isinstance(value, str):
        return value or None, None
    if not isinstance(value, Mapping):
        raise ConfigError(field=where, value=value, problem="must be a run id or a retryctl run record")
    run_id = value.get("id")
    if not isinstance(run_id, str) or not run_id:
        raise ConfigError(field=f"{where}['id']", value=run_id, problem="must be a non-empty string")
    unknown = sorted(set(value) - RunRecord.__required_keys__ - RunRecord.__optional_keys__)
    if unknown:
        raise ConfigError(field=f"{where}[{unknown[0]!r}]", value=value[unknown[0]], problem="unknown field")
    anchor_of(value, where)
    return run_id, Spend(
        used=_amounts(value.get("used", {}), f"{where}['used']"),
        extended=_amounts(value.get("extended", {}), f"{where}['extended']"),
        model_calls=_count(value.get("model_calls", 0), f"{where}['model_calls']"),
        tool_calls=_count(value.get("tool_calls", 0), f"{where}['tool_calls']"),
    )


def anchor_of(value: object, where: str = _WHERE) -> str | None:
    """The anchor of a record (:func:`read_record` checks the rest); ``None`` for a record without one."""
    anchor = value.get("anchor") if isinstance(value, Mapping) else None
    if anchor is not None and (not isinstance(anchor, str) or not anchor):
        raise ConfigError(field=f"{where}['anchor']", value=anchor, problem="must be a non-empty string")
    return anchor


def _amounts(value: object, where: str) -> dict[str, float]:
    if not isinstance(value, Mapping):
        raise ConfigError(field=where, value=value, problem="must map limit names to amounts")
    found: dict[str, float] = {}
    for name, amount in value.items():
        if name not in LIMIT_NAMES:
            problem = f"is not a limit name (one of {', '.join(LIMIT_NAMES)})"
            raise ConfigError(field=f"{where}[{name!r}]", value=amount, problem=problem)
        ok = isinstance(amount, int | float) and not isinstance(amount, bool)
        if not ok or not math.isfinite(amount) or amount < 0:
            raise ConfigError(field=f"{where}[{name!r}]", value=amount, problem="must be a number >= 0")
        found[name] = float(amount)
    return found


def _count(value: object, where: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise ConfigError(field=where, value=value, problem="must be an integer >= 0")
    return value


def spend_of(ledger: Ledger, base: Budget, *, model_calls: int, tool_calls: int) -> Spend:
    """The spend of ``ledger``, opened under ``base`` (what its limits grew by is the ``extend`` grants)."""
    snapshot = ledger.snapshot()
    extended: dict[str, float] = {}
    for name, limit in snapshot.limit.items():
        start = getattr(base, name)
        if limit is not None and start is not None and limit > start:
            # Exact, as the ledger's totals are: 0.3 - 0.1 is 0.2, so the limit seeded is the limit.
            extended[name] = float(Fraction(repr(limit)) - Fraction(repr(start)))
    return Spend(dict(snapshot.used), extended, model_calls, tool_calls)


def seeded_ledger(budget: Budget, clock: Clock, spend: Spend | None) -> Ledger:
    """A ledger under ``budget`` that has already spent ``spend`` (a fresh one without)."""
    if spend is None:
        return Ledger(budget, clock=clock)
    shifted = ShiftedClock(clock)
    ledger = Ledger(budget, clock=shifted)
    if spend.extended:
        ledger.extend(Usage.model_validate({n: _typed(n, v) for n, v in spend.extended.items()}))
    ledger.carry(spend.used)  # capped at the limits: use above a lowered one counts as it spent
    shifted.offset = spend.used.get("wall_s", 0.0)
    return ledger


def _typed(name: str, value: float) -> Any:
    return int(value) if name in COUNT_NAMES else float(value)
