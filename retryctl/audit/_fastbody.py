"""A verdict record's body built without pydantic, for values the record model would keep as they are.

``DecisionLog.record_verdict`` normally dumps the verdict, runs the structlog pipeline and validates
the result against :class:`~retryctl.audit._records.VerdictBody` before it dumps it again: four pydantic
passes over data that is mostly a ``Verdict`` pydantic already checked. When the log has no user
processors, :func:`verdict_body` builds the same body from the verdict's fields and the caller's,
checking each value as the model would. It accepts only values that the model would both accept and
write back unchanged: exact ``str``, ``int``, ``float`` (finite), ``bool``, ``None``, ``list`` and
``dict`` with ``str`` keys, within each field's type and bounds, and text that UTF-8 can carry; the two
conversions it makes are the model's own (a whole ``latency_ms`` becomes a float, a tuple in the
verdict's ``stopping`` a list, as the verdict's JSON dump makes it). Anything else (a ``str`` subclass,
an enum, NaN, a tuple in ``extra``, a lone surrogate, deep nesting, a verdict subclass or one built
without validation) returns ``None``, and the writer takes the full pipeline, which writes the same
bytes or raises the model's own error. ``tests/audit/test_fastbody.py`` checks, on generated verdicts
and calls, that both ways write the same bytes, return the same record and raise the same errors.
"""

from __future__ import annotations

import math
from typing import Any

import orjson

from retryctl.controller import Action, Evidence, Verdict

__all__ = ["EXACT_FLOAT", "MAX_DEPTH", "SCALARS", "Slow", "verdict_body"]

_NONE: type = type(None)
_STR: frozenset[type] = frozenset({str})
_OPT_STR: frozenset[type] = frozenset({str, _NONE})
_FLOAT: frozenset[type] = frozenset({float})
_OPT_FLOAT: frozenset[type] = frozenset({float, _NONE})
SCALARS: frozenset[type] = frozenset({str, int, float, bool, _NONE})
_NESTED: frozenset[type] = frozenset({dict, list})
_TUPLE_NESTED: frozenset[type] = _NESTED | {tuple}
# The fields this module builds a record from; a Verdict or Evidence with others goes the model's way.
_KNOWN = set(Verdict.model_fields) == {
    "action",
    "reason",
    "confidence",
    "checked",
    "answer",
    "switch_to",
    "feedback",
    "retry_after_s",
    "evidence",
} and set(Evidence.model_fields) == {
    "signals",
    "weights",
    "thresholds",
    "budget_used",
    "budget_limit",
    "budget_scope",
    "budget_charged",
    "breakers",
    "error_class",
    "stopping",
    "notes",
}
MAX_DEPTH = 32  # deeper JSON goes the model's way (its recursion rules, not ours)
EXACT_FLOAT = 1 << 53  # an int the model turns into a float, exactly
_PROBE = orjson.OPT_PASSTHROUGH_SUBCLASS | orjson.OPT_PASSTHROUGH_DATETIME | orjson.OPT_PASSTHROUGH_DATACLASS


class Slow(Exception):
    """This value is not one the fast path may vouch for: let the record model judge it."""


def _json(value: Any, *, tuples: bool = False, depth: int = 0) -> Any:
    """A copy of ``value``, which must be built of exact JSON types (no subclass, enum...; a tuple,
    made a list, only with ``tuples``) and finite floats only; raises :class:`Slow` otherwise."""
    kind = type(value)
    if kind is dict:
        items: Any = value.values()
    elif kind is list or (kind is tuple and tuples):
        items = value
    elif kind is float:
        if not math.isfinite(value):
            raise Slow
        return value
    elif kind in SCALARS:
        return value
    else:
        raise Slow
    kinds = {*map(type, items)}
    nested = _TUPLE_NESTED if tuples else _NESTED
    if not kinds <= (SCALARS | nested):
        raise Slow
    if float in kinds and not all(map(math.isfinite, (x for x in items if type(x) is float))):
        raise Slow
    if not kinds.isdisjoint(nested):
        if depth >= MAX_DEPTH:
            raise Slow
        down = depth + 1
        if kind is dict:
            return {
                k: _json(v, tuples=tuples, depth=down) if type(v) in nested else v for k, v in value.items()
            }
        return [_json(v, tuples=tuples, depth=down) if type(v) in nested else v for v in value]
    return dict(value) if kind is dict else list(value)


def _floats(value: Any, allowed: frozenset[type] = _FLOAT) -> bool:
    """Whether ``value`` is a ``dict`` of exactly ``float`` (or ``allowed``) values, all finite."""
    if type(value) is not dict or not {*map(type, value.values())} <= allowed:
        return False
    # A sum of floats is finite only if every term is: NaN and inf carry through (an overflow only
    # sends the record the model's way). ``filter`` drops the Nones (and zeros, which change nothing).
    return math.isfinite(sum(filter(None, value.values())))


def _texts(value: Any, container: type) -> bool:
    """Whether ``value`` is exactly ``container`` holding (as dict values) exact ``str`` only."""
    kind = type(value)
    if kind is not container:
        return False
    items: Any = value.values() if kind is dict else value
    return {*map(type, items)} <= _STR


def verdict_body(
    verdict: Verdict,
    *,
    run_id: str,
    step_id: str,
    attempt: int,
    candidates_summary: Any,
    latency_ms: float,
    target: str | None,
    extra: dict[str, Any] | None,
) -> dict[str, Any] | None:
    """The verdict record's body (keys in the model's order), or ``None``: let the model judge it.

    The dict equals what ``VerdictBody.model_validate(...).model_dump(mode="json", by_alias=True)``
    gives for the same call, value for value and type for type, except that ``ts`` is left empty for
    the caller to set (after this check, so that a refused record does not take a clock reading).
    """
    if not _KNOWN or type(verdict) is not Verdict:
        return None  # a subclass, or a field this module does not know: the model decides
    try:
        evidence = verdict.evidence
        if type(evidence) is not Evidence or type(verdict.action) is not Action:
            return None  # e.g. built without validation (model_construct): the model's dump decides
        action: str = verdict.action.value
        reason, answer, switch_to = verdict.reason, verdict.answer, verdict.switch_to
        feedback, confidence, retry_after_s = verdict.feedback, verdict.confidence, verdict.retry_after_s
        checked = verdict.checked
        signals, weights, thresholds = evidence.signals, evidence.weights, evidence.thresholds
        budget_used, budget_limit = evidence.budget_used, evidence.budget_limit
        budget_scope, budget_charged = evidence.budget_scope, evidence.budget_charged
        breakers, notes, error_class = evidence.breakers, evidence.notes, evidence.error_class
        stopping = evidence.stopping
    except AttributeError:  # model_construct without a required field
        return None
    if type(latency_ms) is int and -EXACT_FLOAT <= latency_ms <= EXACT_FLOAT:
        latency_ms = float(latency_ms)  # as the model converts it
    if extra is None:
        extra = {}
    # Exact types, field by field, as the model keeps them, and finite numbers; text's UTF-8 and the
    # keys' type are left to orjson below, which checks them all in one pass.
    if not (
        {type(run_id), type(step_id), type(action), type(reason)} <= _STR
        and run_id
        and step_id
        and {type(target), type(answer), type(switch_to), type(feedback), type(error_class)} <= _OPT_STR
        and {type(confidence), type(retry_after_s)} <= _OPT_FLOAT
        and type(checked) is bool
        and math.isfinite(sum(filter(None, (confidence, retry_after_s))))
        and type(attempt) is int
        and attempt >= 0
        and type(latency_ms) is float
        and 0.0 <= latency_ms < math.inf
        and _floats(signals)
        and _floats(weights)
        and _floats(thresholds)
        and _floats(budget_used)
        and _floats(budget_limit, _OPT_FLOAT)
        and (budget_scope is None or type(budget_scope) is str)
        and _floats(budget_charged)
        and _texts(breakers, dict)
        and _texts(notes, list)
        and type(stopping) is dict
        and type(extra) is dict
    ):
        return None
    try:
        # ``stopping`` is ``Any`` to the verdict: its JSON dump makes its tuples lists, as this does.
        stopping = _json(stopping, tuples=True)
        candidates_summary = _json(candidates_summary)
        extra = _json(extra)
    except Slow:
        return None
    body = {
        "schema": 1,
        "ts": "",  # set by the caller once the record has passed: its place in the key order
        "kind": "verdict",
        "run_id": run_id,
        "step_id": step_id,
        "attempt": attempt,
        "action": action,
        "reason": reason,
        "confidence": confidence,
        "checked": checked,
        "answer": answer,
        "target": target,
        "switch_to": switch_to,
        "feedback": feedback,
        "retry_after_s": retry_after_s,
        # Copies, as a dump makes them: the record must not share the verdict's dicts.
        "signals": dict(signals),
        "weights": dict(weights),
        "thresholds": dict(thresholds),
        "budget": {
            "used": dict(budget_used),
            "limit": dict(budget_limit),
            "scope": budget_scope,
            "charged": dict(budget_charged),
        },
        "breaker": dict(breakers),
        "error_class": error_class,
        "stopping": stopping,
        "notes": list(notes),
        "candidates_summary": candidates_summary,
        "latency_ms": latency_ms,
        "extra": extra,
    }
    # orjson refuses a lone surrogate, a non-str key, an int beyond 64 bits and deep nesting: once
    # it has encoded the body, every text is UTF-8 and every key a str, as the model requires.
    try:
        orjson.dumps(body, option=_PROBE)
    except orjson.JSONEncodeError:
        return None
    return body
