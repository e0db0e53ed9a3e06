"""retryctl: a confidence-gated retry controller for LangGraph agents.

The most used names are here; each subpackage (``retryctl.controller``, ``retryctl.audit``, ...) exports
the rest. Errors live in :mod:`retryctl.exceptions`.
"""

from __future__ import annotations

from retryctl.audit import DecisionLog, VerifyReport, read_records, verify_log
from retryctl.controller import (
    Action,
    Breaker,
    BreakerConfig,
    Budget,
    Ledger,
    Observation,
    Policy,
    PriceTable,
    Tally,
    Verdict,
    classify,
    decide,
    default_equivalence,
    parse_policy,
)

__version__ = "0.1.0"

__all__ = [
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
]
