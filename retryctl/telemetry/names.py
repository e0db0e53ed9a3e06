"""The names retryctl's spans, events and attributes carry (docs/observability.md says what each means).

The ``gen_ai.*`` names are OpenTelemetry's GenAI semantic conventions (the same strings as the
constants of ``opentelemetry.semconv._incubating.attributes.gen_ai_attributes``, written out here so
that the library does not depend on that package); ``retryctl.*`` are ours, for what the conventions
do not define (they "do not define attempt numbering or operation-level retry metrics").
"""

from __future__ import annotations

from typing import Final

__all__ = [
    "ACTION",
    "ATTEMPT",
    "ATTEMPTS",
    "BATCH_TASKS",
    "BREAKER_OPEN",
    "BREAKER_STATE",
    "BUDGET_LIMIT",
    "BUDGET_SCOPE",
    "BUDGET_USED",
    "CALL_MADE",
    "CHECKED",
    "CONFIDENCE",
    "ERROR_CLASS",
    "ERROR_TYPE",
    "EVALUATION_EVENT",
    "EVALUATION_EXPLANATION",
    "EVALUATION_NAME",
    "EVALUATION_SCORE_LABEL",
    "EVALUATION_SCORE_VALUE",
    "INPUT_TOKENS",
    "KIND",
    "OPERATION_NAME",
    "OUTPUT_TOKENS",
    "REASON",
    "RECORD_HASH",
    "REQUEST_MODEL",
    "RETRY_AFTER_S",
    "RUN_ID",
    "SPAN_BATCH",
    "SPAN_STEP",
    "SPAN_TASK",
    "SPAN_TOOL",
    "STEP_ID",
    "STEP_UNFINISHED",
    "STOPPING_REASON",
    "STOPPING_RULE",
    "SWITCH_TO",
    "TASK_ID",
    "TOOL_CALL_ID",
    "TOOL_NAME",
    "TRACER_NAME",
    "VERDICT_EVALUATION",
]

TRACER_NAME: Final = "retryctl"
"""The instrumentation scope of every span (``get_tracer("retryctl", version)``)."""

# -- spans ------------------------------------------------------------------------------------------
SPAN_STEP: Final = "retryctl.step"
"""A wrapped step or model call: ``retryctl.step <name>``; its attempts are its children."""
SPAN_TOOL: Final = "retryctl.tool"
"""A wrapped tool call: ``retryctl.tool <tool name>``; its attempts are its children."""
SPAN_BATCH: Final = "retryctl.batch"
"""A batch run: one span, a ``retryctl.task <id>`` child per task."""
SPAN_TASK: Final = "retryctl.task"
"""One task of a batch: ``retryctl.task <task id>``."""

# -- GenAI semantic conventions ---------------------------------------------------------------------
OPERATION_NAME: Final = "gen_ai.operation.name"
"""``chat`` on a model attempt, ``execute_tool`` on a tool attempt."""
REQUEST_MODEL: Final = "gen_ai.request.model"
TOOL_NAME: Final = "gen_ai.tool.name"
TOOL_CALL_ID: Final = "gen_ai.tool.call.id"
INPUT_TOKENS: Final = "gen_ai.usage.input_tokens"
OUTPUT_TOKENS: Final = "gen_ai.usage.output_tokens"
ERROR_TYPE: Final = "error.type"
EVALUATION_EVENT: Final = "gen_ai.evaluation.result"
EVALUATION_NAME: Final = "gen_ai.evaluation.name"
EVALUATION_SCORE_VALUE: Final = "gen_ai.evaluation.score.value"
EVALUATION_SCORE_LABEL: Final = "gen_ai.evaluation.score.label"
EVALUATION_EXPLANATION: Final = "gen_ai.evaluation.explanation"
VERDICT_EVALUATION: Final = "retryctl.verdict"
"""The ``gen_ai.evaluation.name`` of a verdict's evaluation event."""

# -- retryctl's own ---------------------------------------------------------------------------------
KIND: Final = "retryctl.kind"
"""``model`` or ``tool``: what the step or call wraps."""
RUN_ID: Final = "retryctl.run_id"
STEP_ID: Final = "retryctl.step_id"
STEP_UNFINISHED: Final = "retryctl.step.unfinished"
"""On a ``ControlledStep``'s span ended before its terminal verdict: ``evicted`` (too many steps held
open at once) or ``restarted`` (the step was started again on the same run)."""
ATTEMPT: Final = "retryctl.attempt"
ATTEMPTS: Final = "retryctl.attempts"
"""On a step or tool span: the attempts it took."""
ACTION: Final = "retryctl.action"
"""The verdict: ``accept``, ``refine``, ``retry``, ``switch``, ``ask_user`` or ``stop``."""
REASON: Final = "retryctl.reason"
"""The verdict's sentence."""
CONFIDENCE: Final = "retryctl.confidence"
CHECKED: Final = "retryctl.checked"
ERROR_CLASS: Final = "retryctl.error.class"
CALL_MADE: Final = "retryctl.call_made"
"""On an attempt span: whether the model or tool was called (``false``: a breaker or a budget refused the
call, or a person's reply decided; such an attempt has no ``gen_ai.*`` call attributes)."""
SWITCH_TO: Final = "retryctl.switch_to"
RETRY_AFTER_S: Final = "retryctl.retry_after_s"
BUDGET_USED: Final = "retryctl.budget.used."
"""A prefix: ``retryctl.budget.used.attempts``, ``...input_tokens``, one per ledger quantity."""
BUDGET_LIMIT: Final = "retryctl.budget.limit."
"""A prefix, as :data:`BUDGET_USED`; a limit that is off is left out."""
BUDGET_SCOPE: Final = "retryctl.budget.scope"
BREAKER_STATE: Final = "retryctl.breaker.state"
"""The state of the target's breaker: ``closed``, ``open`` or ``half_open``."""
BREAKER_OPEN: Final = "retryctl.breaker.open"
"""The keys of every breaker open at the verdict."""
STOPPING_RULE: Final = "retryctl.stopping.rule"
STOPPING_REASON: Final = "retryctl.stopping.reason"
BATCH_TASKS: Final = "retryctl.batch.tasks"
"""On the batch span: the tasks it was given."""
TASK_ID: Final = "retryctl.task.id"
"""On a task span: the task's id (its results line's ``id``)."""
RECORD_HASH: Final = "retryctl.record.hash"
"""The decision-log record's ``hash``: ``retryctl audit`` finds the record from the trace."""
