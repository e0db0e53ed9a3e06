"""Pins the public names: removing or renaming one is a breaking change and must be deliberate."""

import importlib
import pkgutil

import pytest

import retryctl
import retryctl.agent
import retryctl.audit
import retryctl.banks
import retryctl.batch
import retryctl.controller
import retryctl.controller.stopping
import retryctl.evals
import retryctl.exceptions
import retryctl.gateway
import retryctl.middleware
import retryctl.models
import retryctl.nodes
import retryctl.record
import retryctl.replay
import retryctl.report
import retryctl.runtime
import retryctl.sandbox
import retryctl.telemetry
import retryctl.telemetry.names
import retryctl.testing
import retryctl.tools

TOP_LEVEL = {
    "Action",
    "Breaker",
    "BreakerConfig",
    "Budget",
    "DecisionLog",
    "Ledger",
    "Observation",
    "Policy",
    "PriceTable",
    "Tally",
    "Verdict",
    "VerifyReport",
    "__version__",
    "classify",
    "decide",
    "default_equivalence",
    "parse_stopping_rule",
    "read_records",
    "verify_log",
}

CONTROLLER = {
    "CALIBRATED",
    "FUSED",
    "NEAR_GREEDY",
    "Calibration",
    "CalibrationCurve",
    "Relaxation",
    "Repeats",
    "cross_member",
    "Act",
    "Ask",
    "AttemptEngine",
    "AttemptState",
    "Extend",
    "Feedback",
    "Finish",
    "FinishStatus",
    "Request",
    "Sleep",
    "TokenLog",
    "UserReply",
    "parse_reply",
    "reply_verdict",
    "run_check",
    "LIMIT_NAMES",
    "Action",
    "AdaptiveBeta",
    "AdaptiveDirichlet",
    "AnswerEquivalence",
    "Breaker",
    "BreakerConfig",
    "BreakerRecord",
    "BreakerState",
    "BreakerStore",
    "Budget",
    "Classification",
    "ClassifyHook",
    "Clock",
    "DifficultyBudget",
    "EquivalenceLike",
    "ErrorClass",
    "EscWindow",
    "EscalationStep",
    "Evidence",
    "Exhaustion",
    "FixedSamples",
    "Fusion",
    "Ledger",
    "LedgerSnapshot",
    "ManualClock",
    "MemoryBreakerStore",
    "ModelPrice",
    "Observation",
    "Policy",
    "PredictiveMajority",
    "PriceTable",
    "Reservation",
    "RetryOn",
    "Signal",
    "StepLedger",
    "StopDecision",
    "StopRule",
    "StoppingRule",
    "Tally",
    "ThresholdRule",
    "Usage",
    "ValidatorResult",
    "Verdict",
    "agreement",
    "answers_agree",
    "as_equivalence",
    "as_rule",
    "classify",
    "decide",
    "default_equivalence",
    "error_classifier",
    "extract_answer_is",
    "extract_boxed",
    "extract_last_line",
    "extract_last_number",
    "extract_stated_number",
    "fuse",
    "normalise_number",
    "normalise_text",
    "number_equivalence",
    "parse_stopping_rule",
    "parse_retry_after",
    "token_confidence",
    "weakest_span",
}

MIDDLEWARE = {"MODEL_BREAKER", "MODEL_POLICY", "RUN_KEY", "RetryControlState", "RetryController", "Run"}

GATEWAY = {
    "AdaptiveOptions",
    "ApiError",
    "EmbeddedUpstream",
    "Gateway",
    "GatewayConfig",
    "HttpUpstream",
    "Upstream",
    "app_from_env",
    "create_app",
}


STOPPING = {
    "AdaptiveBeta", "AdaptiveDirichlet", "BUILTIN_POLICIES", "ConfidenceWeighted", "DifficultyBudget",
    "EscWindow", "FixedSamples", "GROUP_WINDOW", "KNOWN_POLICIES", "PredictiveCut", "PredictiveMajority",
    "RuleLike",
    "StopAll", "StopAny", "StopDecision", "StopRule", "StoppingRule", "StoppingRuleSpec", "Tally",
    "ThresholdRule", "as_rule", "beta_sf_half", "cut_point", "default_stopping_rule", "fewest_more",
    "group_floor", "parse_stopping_rule",
}  # fmt: skip

NODES = {
    "ASK_EVENT", "ArgsAdapter", "CandidateRecord", "ControlState", "ControlledStep", "ControlledToolCalls",
    "ControlledToolNode", "Emitter", "MemoryToolJournal", "REPLY_EVENT", "ResultValidator",
    "SQLiteToolJournal", "SamplingSchedule", "StepInput", "StepOutput", "StepResult", "StepState",
    "StepVerdict", "TOOL_POLICY", "ToolJournal", "ToolResult", "UserReply", "VERDICT_EVENT",
    "WaitRetryAfter", "parse_reply", "sqlite_checkpointer", "verdict_of",
}  # fmt: skip

TESTING = {
    "CapturedRun", "ScriptItem", "ScriptedBackend", "ScriptedCall", "acapture_verdicts", "capture_verdicts",
}  # fmt: skip

MODELS = {
    "BackendBase", "BackendError", "BackendTimeout", "BackendUnavailable", "BuildCheck", "Candidate",
    "CapabilityRegistry", "ConstrainedBackend", "Constraint", "ConstraintPolicy", "EmbeddedBackend",
    "Grammar", "GrammarDialect", "GrammarKind",
    "LangChainBackend", "MalformedResponse", "Message", "MessagesLike", "ModelBackend", "NMode",
    "OpenAIBackend",
    "ParamsToKwargs", "RepeatedFault", "ReplayBackend", "ReplayExhausted", "RetrySettings", "SamplingParams",
    "ScriptItem", "ScriptedBackend", "ScriptedCall", "ServerCapabilities", "ServerFault",
    "Stage", "StageOutcome", "TerminalBackendError", "TokenLogprob",
    "ToolCall", "ToolSpec", "TransientBackendError", "UnsupportedParameter", "Usage",
    "check_embedded_build", "find_smollm2_gguf", "llama_cpp_style_kwargs", "normalise_messages",
    "openai_style_kwargs",
    "random_order", "rung_for", "sample_blocking", "stop_only_kwargs",
}  # fmt: skip

TOOLS = {
    "CalculatorArgs", "CalculatorError", "CalculatorTool", "PythonArgs", "PythonRunReport", "PythonTool",
    "ToolRegistry", "calculate", "default_registry",
}  # fmt: skip

SANDBOX = {
    "ExecResult", "ProbeReport", "Sandbox", "SandboxError", "SandboxLimits", "SandboxUnavailable", "Tier",
    "TierStatus", "detect_tier", "probe_tiers", "run_code",
}  # fmt: skip

BATCH = {
    "BatchBreaker", "BatchConfig", "BatchOutcome", "DEFAULT_GRAPH", "Done", "Executor", "GraphJob",
    "InProcessExecutor", "Invocable", "Job", "RayExecutor", "ResultsFile", "ResultsState", "Task",
    "TaskFormatError", "at_max_budget", "load_graph", "load_tasks", "read_results", "run_batch",
    "summarise_results",
}  # fmt: skip

RECORD = {
    "BankJob", "EXTRACTIONS", "Extraction", "RecordPlan", "bank_line", "record_bank", "recorded_ids",
    "sampling_of",
}  # fmt: skip

REPLAY = {
    "BUILTIN_BENCH_POLICIES", "CodedBank", "CodedQuestion", "CurvePoint", "DIFFICULTY_SHARES", "NO_ANSWER",
    "ReplayResult", "STRATA", "code_bank", "curve_for", "make_orders", "paired_delta", "replay",
    "run_policies", "strata_of", "summary_row", "write_synthetic_bank",
}  # fmt: skip

AUDIT = {
    "BudgetState", "ChainScan", "ChainSink", "DecisionLog", "GENESIS_HASH", "LogRecord", "RepairRecord",
    "SCHEMA_VERSION", "SummaryRecord", "VerdictRecord", "VerifyReport", "canonical_bytes", "check_chain",
    "parse_record", "read_records", "record_hash", "settled_size", "verify_log",
}  # fmt: skip

AGENT = {
    "DEMO_QUESTION", "DemoResult", "DemoState", "NO_ANSWER", "build_demo_graph", "demo_policy",
    "demo_schedule",
}  # fmt: skip

BANKS = {
    "BankQuestion", "RecordedSample", "RecordedStage", "load_bank",
}  # fmt: skip

EXCEPTIONS = {
    "BankFormatError", "BreakerOpen", "BreakerStoreError", "BudgetExceeded", "ConfigError", "ControlSignal",
    "FileFormatError", "LogIntegrityError", "MissingExtra", "RetryctlError", "RuntimeFailure", "SandboxError",
    "SandboxUnavailable", "SemanticError", "TaskFormatError", "UnknownPolicyError", "UsageError",
}  # fmt: skip


REPORT = {
    "CONFIDENCE_BINS", "PARALLEL_MIN_BYTES", "Analysis", "StepOutcome", "TokenRow", "analyse",
    "analyse_records",
    "audit_log", "audit_summary", "diff_sides", "iter_raw_records", "reason_shape",
    "render_diff",
    "render_html", "render_summary", "render_verification", "run_story", "side_figures", "start_verification",
    "story_lines", "summarise",
}  # fmt: skip

RUNTIME = {"RedisBreakerStore", "SQLiteBreakerStore", "averify", "verify"}

EVALS = {
    "HELDOUT_STRATUM",
    "STRATA",
    "Graded",
    "Outcome",
    "Scores",
    "WordProblem",
    "auroc",
    "balanced_weights",
    "brier",
    "by_stratum",
    "ece",
    "fit_calibration",
    "fit_curve",
    "heldout_problems",
    "load_calibration",
    "oracle_rows",
    "precision_at",
    "reliability",
    "risk_coverage",
    "save_calibration",
    "scores",
    "selective",
    "split_of",
    "transfer",
    "word_problems",
}

TELEMETRY = {"NO_TRACING", "OTEL_AVAILABLE", "Tracing", "incoming_context", "names"}

TELEMETRY_NAMES = {
    "BATCH_TASKS",
    "TASK_ID",
    "ACTION",
    "CALL_MADE",
    "ATTEMPT",
    "ATTEMPTS",
    "BREAKER_OPEN",
    "BREAKER_STATE",
    "BUDGET_LIMIT",
    "BUDGET_SCOPE",
    "BUDGET_USED",
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
    "TOOL_CALL_ID",
    "TOOL_NAME",
    "TRACER_NAME",
    "VERDICT_EVALUATION",
}

PINS = [
    (retryctl, TOP_LEVEL),
    (retryctl.controller, CONTROLLER),
    (retryctl.middleware, MIDDLEWARE),
    (retryctl.gateway, GATEWAY),
    (retryctl.controller.stopping, STOPPING),
    (retryctl.nodes, NODES),
    (retryctl.testing, TESTING),
    (retryctl.models, MODELS),
    (retryctl.tools, TOOLS),
    (retryctl.sandbox, SANDBOX),
    (retryctl.batch, BATCH),
    (retryctl.replay, REPLAY),
    (retryctl.record, RECORD),
    (retryctl.audit, AUDIT),
    (retryctl.agent, AGENT),
    (retryctl.banks, BANKS),
    (retryctl.exceptions, EXCEPTIONS),
    (retryctl.runtime, RUNTIME),
    (retryctl.report, REPORT),
    (retryctl.evals, EVALS),
    (retryctl.telemetry, TELEMETRY),
    (retryctl.telemetry.names, TELEMETRY_NAMES),
]
PINNED = [module for module, _ in PINS]


class TestPublicApi:
    @pytest.mark.parametrize(("module", "names"), PINS, ids=lambda x: getattr(x, "__name__", ""))
    def test_exports_are_pinned(self, module, names):
        assert set(module.__all__) == names

    @pytest.mark.parametrize("module", PINNED, ids=lambda m: m.__name__)
    def test_every_export_exists(self, module):
        missing = [name for name in module.__all__ if not hasattr(module, name)]
        assert missing == []

    def test_every_public_module_is_pinned(self):
        # A new public package or module (one with __all__) must be pinned above, or it grows the
        # surface unseen. The CLI's names are its commands.
        found = set()
        for info in pkgutil.walk_packages(retryctl.__path__, "retryctl."):
            if any(part.startswith("_") for part in info.name.split(".")):
                continue
            if info.name.startswith("retryctl.cli"):
                continue
            if hasattr(importlib.import_module(info.name), "__all__"):
                found.add(info.name)
        assert found - {m.__name__ for m in PINNED} == set()

    def test_version_matches_distribution(self):
        from importlib.metadata import version

        assert retryctl.__version__ == version("retryctl")
