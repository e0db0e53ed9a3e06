"""A verdict's share of its record lines, encoded once: :class:`VerdictLine`, and the record clock.

A step that logs the same verdict many times (a tool node accepting call after call) pays for checking
and encoding the verdict's fields once: the line keeps the canonical bytes around holes for the call's
fields (``run_id``, ``step_id``, ``attempt``, ``target``, ``latency_ms``, ``candidates_summary``,
``extra``), the clock's (``ts``) and the chain's (``prev_hash``), and each record fills in only those.
The values are checked as :func:`~retryctl.audit._fastbody.verdict_body` checks them; anything it
cannot vouch for takes the ordinary way. ``tests/audit/test_fastbody.py`` checks the bytes are the
same. :func:`iso_utc` writes ``ts`` as structlog's ``TimeStamper(fmt="iso", utc=True)`` does.
"""

from __future__ import annotations

import datetime
import math
import time
from collections.abc import Callable
from typing import Any

import orjson

from retryctl.audit._canonical import (
    ORJSON_OPTIONS,
    PREV_KEY,
    RUN_KEY,
    SCHEMA_KEY,
    fast_canonical_bytes,
    may_differ,
)
from retryctl.audit._fastbody import EXACT_FLOAT, MAX_DEPTH, SCALARS, Slow, verdict_body
from retryctl.controller import Verdict

__all__ = ["VerdictLine", "iso_utc", "utc_now_iso"]


def _vouch(value: Any, depth: int = 0) -> bool:
    """Raise :class:`Slow` unless :func:`_json` would take ``value`` (without ``tuples``): the same
    test, without the copy (a line is encoded at once, so nothing keeps the value). Whether it holds
    a float (only then may orjson's bytes differ from the canonical ones)."""
    kind = type(value)
    if kind is dict:
        items: Any = value.values()
    elif kind is list:
        items = value
    elif kind is float:
        if not math.isfinite(value):
            raise Slow
        return True
    elif kind in SCALARS:
        return False
    else:
        raise Slow
    floats = False
    for item in items:
        kind = type(item)
        if kind is float:
            if not math.isfinite(item):
                raise Slow
            floats = True
        elif kind is dict or kind is list:
            if depth >= MAX_DEPTH:
                raise Slow
            floats = _vouch(item, depth + 1) or floats
        elif kind not in SCALARS:
            raise Slow
    return floats


def _encoded(value: Any) -> bytes:
    """The canonical JSON of a call's value (``candidates_summary``, ``extra``), if the fast path can
    vouch for it; raises :class:`Slow` (or orjson's error) otherwise."""
    floats = _vouch(value)
    raw = orjson.dumps(value, option=ORJSON_OPTIONS)
    if floats and may_differ(b":" + raw):
        raise Slow  # a float orjson may spell otherwise: json.dumps' bytes, the ordinary way
    # A nested key of a chained field's name: the sorted layout, the ordinary way (plain byte
    # searches, not a regex: the fewer routines a record runs through, the fewer the cache misses).
    if PREV_KEY in raw or SCHEMA_KEY in raw or RUN_KEY in raw:
        raise Slow
    return raw


def _float_bytes(value: float) -> bytes:
    """``value`` as ``json.dumps`` writes it (``float.__repr__``); orjson's bytes where the two agree
    (zero, and from 1e-4 up to 1e16, where both write the digits positionally)."""
    if value == 0.0 or 1e-4 <= abs(value) < 1e16:
        return orjson.dumps(value)
    return repr(value).encode()


_SECOND: list[tuple[int, str]] = [(-1, "")]
"""The last second :func:`iso_utc` wrote, and its text up to the seconds."""


def iso_utc(ns: int) -> str:
    """The UTC time ``ns`` nanoseconds after the epoch, to the microsecond (floored, as
    ``datetime.now`` reads the clock), in structlog's ``TimeStamper(fmt="iso", utc=True)`` text:
    ``datetime.isoformat()`` with ``Z`` for ``+00:00``, the fraction left out when it is zero."""
    seconds, micros = divmod(ns // 1000, 1_000_000)
    held = _SECOND[0]
    if held[0] != seconds:
        text = datetime.datetime.fromtimestamp(seconds, tz=datetime.UTC).isoformat()
        held = (seconds, text.removesuffix("+00:00"))
        _SECOND[0] = held  # one item replaced whole: threads see the old second or the new one
    return f"{held[1]}.{micros:06d}Z" if micros else f"{held[1]}Z"


def utc_now_iso() -> str:
    """Now, as :func:`iso_utc` writes it: what structlog's ISO UTC ``TimeStamper`` writes."""
    return iso_utc(time.time_ns())


_SLOTS = (
    "attempt",
    "candidates_summary",
    "extra",
    "latency_ms",
    "prev_hash",
    "run_id",
    "step_id",
    "target",
    "ts",
)
"""The keys of a verdict record that are not the verdict's (the call's, the clock's, the chain's)."""


class VerdictLine:
    """The canonical bytes of every record of one verdict, with holes for the fields that are not the
    verdict's (:data:`_SLOTS`): the verdict's fields are checked and encoded once, by
    :func:`verdict_body` and the canonical encoder, and each record fills in only the call's.

    The holes are found by encoding the body with a sentinel string in each: so the bytes around them
    are the encoder's own. :meth:`fill` checks the call's values as :func:`verdict_body` does and
    encodes each as the canonical encoder would in its place (``latency_ms`` as ``json.dumps`` spells
    a float, ``repr``); whatever it cannot vouch for returns ``None`` and the record takes the
    ordinary way. ``tests/audit/test_fastbody.py`` checks that the lines are the same bytes.

    A verdict is frozen, but its evidence holds dicts: the line keeps the verdict's fields and a deep
    copy of its evidence's as they were when it was made, and :meth:`matches` says whether a verdict
    still equals them.
    """

    __slots__ = ("_counts", "_evidence", "_fields", "_parts")

    def __init__(
        self,
        fields: dict[str, Any],
        evidence: dict[str, Any],
        parts: tuple[bytes, ...],
        counts: tuple[int, int, int],
    ) -> None:
        self._fields = fields
        self._evidence = evidence
        self._parts = parts
        self._counts = counts

    @classmethod
    def of(cls, verdict: Verdict) -> VerdictLine | None:
        """The line of ``verdict``, or ``None`` when its fields are not ones the fast path takes."""
        copy = verdict.model_copy(deep=True)
        body = verdict_body(
            copy,
            run_id="-",
            step_id="-",
            attempt=0,
            candidates_summary=None,
            latency_ms=0.0,
            target=None,
            extra=None,
        )
        if body is None:
            return None
        sentinels = {key: f"\x00retryctl:{key}\x00" for key in _SLOTS}
        body.update(sentinels)
        raw = fast_canonical_bytes(body)
        holes = [orjson.dumps(sentinels[key]) for key in _SLOTS]
        holes[_SLOTS.index("prev_hash")] = holes[_SLOTS.index("prev_hash")][1:-1]  # the sink fills
        # in the hash between the string's quotes
        if any(raw.count(hole) != 1 for hole in holes):
            return None  # the verdict's own text holds a sentinel: no line for it
        parts: list[bytes] = []
        for hole in holes:  # in the order of _SLOTS, sorted as the canonical encoder lays keys out
            head, raw = raw.split(hole)
            parts.append(head)
        parts.append(raw)
        counts = tuple(sum(p.count(k) for p in parts) for k in (PREV_KEY, SCHEMA_KEY, RUN_KEY))
        # The fields as they are (the same objects: compared by identity first, so the evidence
        # compares by its dicts below), the evidence's as copied (nobody else holds the copy).
        fields = dict(verdict.__dict__)
        return cls(fields, copy.evidence.__dict__, tuple(parts), (counts[0], counts[1], counts[2]))

    def matches(self, verdict: Verdict) -> bool:
        """Whether ``verdict`` still equals the verdict this line was made from (what pydantic's
        ``==`` compares: the fields, the evidence's field by field)."""
        return verdict.__dict__ == self._fields and verdict.evidence.__dict__ == self._evidence

    def fill(
        self,
        now: Callable[[], str],
        *,
        run_id: str,
        step_id: str,
        attempt: int,
        candidates_summary: Any,
        latency_ms: float,
        target: str | None,
        extra: dict[str, Any] | None,
    ) -> tuple[bytes, bytes] | None:
        """The record's canonical bytes without ``hash``, as the parts before and after the
        ``prev_hash`` value; or ``None``: let the ordinary way write it. ``now()`` gives ``ts``, read
        once the call's values have passed (as :meth:`DecisionLog.record_verdict` reads it)."""
        if type(latency_ms) is int and -EXACT_FLOAT <= latency_ms <= EXACT_FLOAT:
            latency_ms = float(latency_ms)
        if extra is None:
            extra = {}
        if not (
            type(run_id) is str
            and type(step_id) is str
            and run_id
            and step_id
            and (target is None or type(target) is str)
            and type(attempt) is int
            and attempt >= 0
            and type(latency_ms) is float
            and 0.0 <= latency_ms < math.inf
            and type(extra) is dict
        ):
            return None
        try:
            summary = _encoded(candidates_summary)
            extras = b"{}" if not extra else _encoded(extra)
            # Text: orjson refuses a lone surrogate, as the ordinary way's probe does.
            run, step, tool = orjson.dumps(run_id), orjson.dumps(step_id), orjson.dumps(target)
        except (Slow, orjson.JSONEncodeError):
            return None
        if self._counts != (1, 1, 1):
            return None  # the verdict's own fields hold a chained field's key: the sorted layout
        p = self._parts
        before = b"".join(
            (p[0], b"%d" % attempt, p[1], summary, p[2], extras, p[3], _float_bytes(latency_ms), p[4])
        )
        stamp = orjson.dumps(now())
        after = b"".join((p[5], run, p[6], step, p[7], tool, p[8], stamp, p[9]))
        return before, after
