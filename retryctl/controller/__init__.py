"""The pure decision core: signals, stopping rules, budgets, breakers, error classes and ``decide``.

Nothing in this package imports LangGraph, openai or any I/O module (files, sockets, databases, thread
pools: those are in :mod:`retryctl.runtime`); every decision is a function of plain data.
"""

from __future__ import annotations

from retryctl._answers import (
    AnswerEquivalence,
    EquivalenceLike,
    answers_agree,
    as_equivalence,
    default_equivalence,
    extract_answer_is,
    extract_boxed,
    extract_last_line,
    extract_last_number,
    extract_stated_number,
    normalise_number,
    normalise_text,
    number_equivalence,
)
from retryctl.controller._breaker import Breaker, BreakerConfig
from retryctl.controller._breaker_store import (
    BreakerRecord,
    BreakerState,
    BreakerStore,
    MemoryBreakerStore,
)
from retryctl.controller._budget import LIMIT_NAMES, Budget, Usage
from retryctl.controller._calibration import Calibration, CalibrationCurve
from retryctl.controller._clock import Clock, ManualClock
from retryctl.controller._decide import CALIBRATED, FUSED, Observation, decide
from retryctl.controller._engine import (
    Act,
    Ask,
    AttemptEngine,
    AttemptState,
    Extend,
    Feedback,
    Finish,
    FinishStatus,
    Request,
    Sleep,
    run_check,
)
from retryctl.controller._error_rules import ClassifyHook, RetryOn, error_classifier
from retryctl.controller._errors import Classification, ErrorClass, classify, parse_retry_after
from retryctl.controller._evidence import NEAR_GREEDY, Repeats
from retryctl.controller._ledger import Exhaustion, Ledger, LedgerSnapshot, Reservation, StepLedger
from retryctl.controller._policy import EscalationStep, Policy
from retryctl.controller._pricing import ModelPrice, PriceTable
from retryctl.controller._relaxation import Relaxation
from retryctl.controller._reply import UserReply, parse_reply, reply_verdict
from retryctl.controller._signals import (
    Fusion,
    Signal,
    ValidatorResult,
    agreement,
    cross_member,
    fuse,
    token_confidence,
    weakest_span,
)
from retryctl.controller._token_log import TokenLog
from retryctl.controller._verdict import Action, Evidence, Verdict
from retryctl.controller.stopping import (
    AdaptiveBeta,
    AdaptiveDirichlet,
    DifficultyBudget,
    EscWindow,
    FixedSamples,
    PredictiveMajority,
    StopDecision,
    StoppingRule,
    StopRule,
    Tally,
    ThresholdRule,
    as_rule,
    parse_stopping_rule,
)

__all__ = [
    "CALIBRATED",
    "FUSED",
    "LIMIT_NAMES",
    "NEAR_GREEDY",
    "Act",
    "Action",
    "AdaptiveBeta",
    "AdaptiveDirichlet",
    "AnswerEquivalence",
    "Ask",
    "AttemptEngine",
    "AttemptState",
    "Breaker",
    "BreakerConfig",
    "BreakerRecord",
    "BreakerState",
    "BreakerStore",
    "Budget",
    "Calibration",
    "CalibrationCurve",
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
    "Extend",
    "Feedback",
    "Finish",
    "FinishStatus",
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
    "Relaxation",
    "Repeats",
    "Request",
    "Reservation",
    "RetryOn",
    "Signal",
    "Sleep",
    "StepLedger",
    "StopDecision",
    "StopRule",
    "StoppingRule",
    "Tally",
    "ThresholdRule",
    "TokenLog",
    "Usage",
    "UserReply",
    "ValidatorResult",
    "Verdict",
    "agreement",
    "answers_agree",
    "as_equivalence",
    "as_rule",
    "classify",
    "cross_member",
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
    "parse_reply",
    "parse_retry_after",
    "parse_stopping_rule",
    "reply_verdict",
    "run_check",
    "token_confidence",
    "weakest_span",
]
