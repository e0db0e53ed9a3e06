"""retryctl: a confidence-gated retry controller for LangGraph agents.

The most used names are here; each subpackage (``retryctl.controller``, ``retryctl.audit``, ...) exports
the rest. Errors live in :mod:`retryctl.exceptions`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from retryctl._lazy import lazy_exports

if TYPE_CHECKING:
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
        parse_stopping_rule,
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
    "parse_stopping_rule",
    "read_records",
    "verify_log",
]

# Each name is imported from its subpackage on first use (PEP 562): importing any retryctl module
# imports this package first, and `retryctl audit` needs neither the controller nor the log writer
# (with them it took ~0.45 s to start, without them ~0.15 s).
_MODULES = {
    "DecisionLog": "audit",
    "VerifyReport": "audit",
    "read_records": "audit",
    "verify_log": "audit",
    "Action": "controller",
    "Breaker": "controller",
    "BreakerConfig": "controller",
    "Budget": "controller",
    "Ledger": "controller",
    "Observation": "controller",
    "Policy": "controller",
    "PriceTable": "controller",
    "Tally": "controller",
    "Verdict": "controller",
    "classify": "controller",
    "decide": "controller",
    "default_equivalence": "controller",
    "parse_stopping_rule": "controller",
}
# `import retryctl` used to import these, so `retryctl.controller.Policy` worked without importing
# retryctl.controller; it still does.
_SUBPACKAGES = {"audit", "controller", "exceptions"}


__getattr__, __dir__ = lazy_exports(globals(), _MODULES, subpackages=_SUBPACKAGES)
