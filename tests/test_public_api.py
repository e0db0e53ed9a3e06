"""Pins the public names: removing or renaming one is a breaking change and must be deliberate."""

import importlib

import pytest

import retryctl
import retryctl.controller
import retryctl.middleware

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
    "parse_policy",
    "read_records",
    "verify_log",
}

CONTROLLER = {
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
    "RedisBreakerStore",
    "Reservation",
    "SQLiteBreakerStore",
    "Signal",
    "StepLedger",
    "StopAll",
    "StopAny",
    "StopDecision",
    "StopRule",
    "StoppingRule",
    "Tally",
    "ThresholdRule",
    "Usage",
    "ValidatorResult",
    "Verdict",
    "agreement",
    "as_equivalence",
    "as_rule",
    "averify",
    "classify",
    "decide",
    "default_equivalence",
    "default_policy",
    "extract_answer_is",
    "extract_boxed",
    "extract_last_line",
    "extract_last_number",
    "fuse",
    "normalise_number",
    "normalise_text",
    "parse_policy",
    "parse_retry_after",
    "token_confidence",
    "validators_signal",
    "verify",
    "weakest_span",
}

MIDDLEWARE = {"MODEL_POLICY", "RUN_KEY", "RetryControlState", "RetryController", "Run"}


class TestPublicApi:
    @pytest.mark.parametrize(
        ("module", "names"),
        [
            (retryctl, TOP_LEVEL),
            (retryctl.controller, CONTROLLER),
            (retryctl.middleware, MIDDLEWARE),
        ],
    )
    def test_exports_are_pinned(self, module, names):
        assert set(module.__all__) == names

    @pytest.mark.parametrize(
        "module",
        ["retryctl", "retryctl.controller", "retryctl.audit", "retryctl.exceptions", "retryctl.middleware"],
    )
    def test_every_export_exists(self, module):
        mod = importlib.import_module(module)
        missing = [name for name in mod.__all__ if not hasattr(mod, name)]
        assert missing == []

    def test_version_matches_distribution(self):
        from importlib.metadata import version

        assert retryctl.__version__ == version("retryctl")
