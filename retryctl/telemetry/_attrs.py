"""A verdict as span attributes and as the ``gen_ai.evaluation.result`` event.

The verdict is an *evaluation* of the attempt's output in the GenAI conventions' sense (a score, a
label, an explanation, on the span of the operation it judged), so it is written with the evaluation
event. It is not called a guardrail anywhere: a guardrail in the conventions' vocabulary blocks or
rewrites content for a safety or policy reason; a verdict decides only what the controller does next
(accept, retry, switch...), and naming it a guardrail would put retries among the safety findings of
every backend that reads these spans.

Only what the verdict and the record say is written: no field is inferred (lesson 1 of the design: a
trace must be true to what the driver did).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from retryctl.telemetry import names as n

if TYPE_CHECKING:
    from retryctl.controller import Verdict

__all__ = [
    "OPERATIONS",
    "attempt_attributes",
    "call_attributes",
    "evaluation_attributes",
    "verdict_attributes",
]

OPERATIONS = {"model": "chat", "tool": "execute_tool"}
"""``gen_ai.operation.name`` by what is wrapped."""


def attempt_attributes(attempt: int) -> dict[str, Any]:
    """What an attempt span says when it starts: its number. Whether it is a model or tool call is
    known only at its verdict (a breaker or a budget may refuse the call): :func:`call_attributes`."""
    return {n.ATTEMPT: attempt}


def call_attributes(kind: str, target: str, *, call_made: bool) -> dict[str, Any]:
    """An attempt's call: the GenAI operation and its target when the model or tool was called; only
    ``retryctl.call_made=false`` when it was not (an attempt refused is not dressed as a call)."""
    if not call_made:
        return {n.CALL_MADE: False}
    return {
        n.OPERATION_NAME: OPERATIONS.get(kind, kind),
        n.REQUEST_MODEL if kind == "model" else n.TOOL_NAME: target,
        n.CALL_MADE: True,
    }


def verdict_attributes(
    verdict: Verdict, *, record_hash: str | None, call_made: bool = True
) -> dict[str, Any]:
    """The verdict's attributes on its attempt span (``retryctl.*``, ``error.type``, token usage);
    ``error.type`` only on a call that was made (a refusal is ``retryctl.error.class`` alone)."""
    ev = verdict.evidence
    out: dict[str, Any] = {
        n.ACTION: verdict.action.value,
        n.REASON: verdict.reason,
        n.CHECKED: verdict.checked,
    }
    if verdict.confidence is not None:
        out[n.CONFIDENCE] = verdict.confidence
    if verdict.switch_to is not None:
        out[n.SWITCH_TO] = verdict.switch_to
    if verdict.retry_after_s is not None:
        out[n.RETRY_AFTER_S] = verdict.retry_after_s
    if ev.error_class is not None:
        # The conventions' error.type wants a low-cardinality class: the controller's error class is one.
        if call_made:
            out[n.ERROR_TYPE] = ev.error_class
        out[n.ERROR_CLASS] = ev.error_class
    charged = ev.budget_charged
    if "input_tokens" in charged:
        out[n.INPUT_TOKENS] = int(charged["input_tokens"])
    if "output_tokens" in charged:
        out[n.OUTPUT_TOKENS] = int(charged["output_tokens"])
    for name, used in ev.budget_used.items():
        out[n.BUDGET_USED + name] = used
    for name, limit in ev.budget_limit.items():
        if limit is not None:
            out[n.BUDGET_LIMIT + name] = limit
    if ev.budget_scope is not None:
        out[n.BUDGET_SCOPE] = ev.budget_scope
    if ev.breakers:
        opened = sorted(k for k, s in ev.breakers.items() if s == "open")
        if opened:
            out[n.BREAKER_OPEN] = opened
    rule = ev.stopping.get("rule")
    if rule is not None:
        out[n.STOPPING_RULE] = str(rule)
    reason = ev.stopping.get("reason")
    if reason is not None:
        out[n.STOPPING_REASON] = str(reason)
    if record_hash:
        out[n.RECORD_HASH] = record_hash
    return out


def evaluation_attributes(verdict: Verdict, attempt: int) -> dict[str, Any]:
    """The ``gen_ai.evaluation.result`` event of a verdict: its label is the action, its score the
    fused confidence (left out when no check ran: an unchecked verdict claims none), its explanation
    the reason."""
    out: dict[str, Any] = {
        n.EVALUATION_NAME: n.VERDICT_EVALUATION,
        n.EVALUATION_SCORE_LABEL: verdict.action.value,
        n.EVALUATION_EXPLANATION: verdict.reason,
        n.ATTEMPT: attempt,
    }
    if verdict.confidence is not None:
        out[n.EVALUATION_SCORE_VALUE] = verdict.confidence
    return out
