"""The pure decision core: signals, stopping rules, budgets, breakers, error classes and ``decide``.

Nothing in this package imports LangGraph or openai; every decision is a function of plain data.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from retryctl.controller._breaker import Breaker, BreakerConfig
from retryctl.controller._breaker_store import (
    BreakerRecord,
    BreakerState,
    BreakerStore,
    MemoryBreakerStore,
    SQLiteBreakerStore,
)
from retryctl.controller._budget import LIMIT_NAMES, Budget, Usage
from retryctl.controller._clock import Clock, ManualClock
from retryctl.controller._decide import Observation, decide
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
from retryctl.controller._equivalence import (
    AnswerEquivalence,
    EquivalenceLike,
    as_equivalence,
    default_equivalence,
    extract_answer_is,
    extract_boxed,
    extract_last_line,
    extract_last_number,
    normalise_number,
    normalise_text,
)
from retryctl.controller._errors import Classification, ErrorClass, classify, parse_retry_after
from retryctl.controller._ledger import Exhaustion, Ledger, LedgerSnapshot, Reservation, StepLedger
from retryctl.controller._policy import EscalationStep, Policy
from retryctl.controller._pricing import ModelPrice, PriceTable
from retryctl.controller._reply import UserReply, parse_reply, reply_verdict
from retryctl.controller._signals import (
    Fusion,
    Signal,
    ValidatorResult,
    agreement,
    averify,
    fuse,
    token_confidence,
    validators_signal,
    verify,
    weakest_span,
)
from retryctl.controller._verdict import Action, Evidence, Verdict
from retryctl.controller.stopping import (
    AdaptiveBeta,
    AdaptiveDirichlet,
    DifficultyBudget,
    EscWindow,
    FixedSamples,
    PredictiveMajority,
    StopAll,
    StopAny,
    StopDecision,
    StoppingRule,
    StopRule,
    Tally,
    ThresholdRule,
    as_rule,
    default_policy,
    parse_policy,
)

if TYPE_CHECKING:
    from retryctl.controller._breaker_store_redis import RedisBreakerStore

__all__ = [
    "LIMIT_NAMES",
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
    "Classification",
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
    "RedisBreakerStore",
    "Request",
    "Reservation",
    "SQLiteBreakerStore",
    "Signal",
    "Sleep",
    "StepLedger",
    "StopAll",
    "StopAny",
    "StopDecision",
    "StopRule",
    "StoppingRule",
    "Tally",
    "ThresholdRule",
    "Usage",
    "UserReply",
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
    "parse_reply",
    "parse_retry_after",
    "reply_verdict",
    "run_check",
    "token_confidence",
    "validators_signal",
    "verify",
    "weakest_span",
]


def __getattr__(name: str) -> object:
    # RedisBreakerStore needs the optional redis package: import it on first use, so that
    # `import retryctl` works without it and the error names the extra to install.
    if name == "RedisBreakerStore":
        from retryctl.controller._breaker_store_redis import RedisBreakerStore

        return RedisBreakerStore
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
