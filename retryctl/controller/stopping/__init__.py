"""Stopping rules: when has a step drawn enough samples? Small composable rules (``&``, ``|``).

Built-ins: :class:`FixedSamples` (``sc-N``), :class:`ThresholdRule` (``threshold``), :class:`EscWindow`
(``esc``), :class:`AdaptiveBeta` (``ac-beta``), :class:`AdaptiveDirichlet` (``ac-dirichlet``),
:class:`DifficultyBudget` (``budget``), :class:`PredictiveMajority` (``predictive``),
:class:`ConfidenceWeighted` (``weighted``) and the default, :class:`PredictiveCut` (``default``:
``predictive`` with samples cut short).
"""

from __future__ import annotations

from retryctl.controller.stopping._adaptive import (
    AdaptiveBeta,
    AdaptiveDirichlet,
    PredictiveMajority,
)
from retryctl.controller.stopping._base import (
    RuleLike,
    StopAll,
    StopAny,
    StopDecision,
    StoppingRule,
    StopRule,
    Tally,
    as_rule,
    fewest_more,
)
from retryctl.controller.stopping._default import PredictiveCut
from retryctl.controller.stopping._maths import (
    beta_sf_half,
)
from retryctl.controller.stopping._registry import (
    BUILTIN_POLICIES,
    KNOWN_POLICIES,
    StoppingRuleSpec,
    default_stopping_rule,
    parse_stopping_rule,
)
from retryctl.controller.stopping._simple import (
    DifficultyBudget,
    EscWindow,
    FixedSamples,
    ThresholdRule,
)
from retryctl.controller.stopping._weighted import (
    GROUP_WINDOW,
    ConfidenceWeighted,
    cut_point,
    group_floor,
)

__all__ = [
    "BUILTIN_POLICIES",
    "GROUP_WINDOW",
    "KNOWN_POLICIES",
    "AdaptiveBeta",
    "AdaptiveDirichlet",
    "ConfidenceWeighted",
    "DifficultyBudget",
    "EscWindow",
    "FixedSamples",
    "PredictiveCut",
    "PredictiveMajority",
    "RuleLike",
    "StopAll",
    "StopAny",
    "StopDecision",
    "StopRule",
    "StoppingRule",
    "StoppingRuleSpec",
    "Tally",
    "ThresholdRule",
    "as_rule",
    "beta_sf_half",
    "cut_point",
    "default_stopping_rule",
    "fewest_more",
    "group_floor",
    "parse_stopping_rule",
]
