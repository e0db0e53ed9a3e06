"""Stopping rules: when has a step drawn enough samples? Small composable rules (``&``, ``|``).

Built-ins: :class:`FixedSamples` (``sc-N``), :class:`ThresholdRule` (``threshold``), :class:`EscWindow`
(``esc``), :class:`AdaptiveBeta` (``ac-beta``), :class:`AdaptiveDirichlet` (``ac-dirichlet``),
:class:`DifficultyBudget` (``budget``) and the default, :class:`PredictiveMajority` (``default``).
"""

from __future__ import annotations

from retryctl.controller.stopping._adaptive import (
    AdaptiveBeta,
    AdaptiveDirichlet,
    PredictiveMajority,
    predictive_stay_prob,
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
)
from retryctl.controller.stopping._maths import (
    beta_sf_half,
    dirichlet_leader_prob,
    gamma_p,
    regularised_beta,
)
from retryctl.controller.stopping._registry import (
    BUILTIN_POLICIES,
    KNOWN_POLICIES,
    PolicySpec,
    default_policy,
    parse_policy,
)
from retryctl.controller.stopping._simple import (
    DifficultyBudget,
    EscWindow,
    FixedSamples,
    ThresholdRule,
)
from retryctl.controller.stopping._votes import Votes, votes_of

__all__ = [
    "BUILTIN_POLICIES",
    "KNOWN_POLICIES",
    "AdaptiveBeta",
    "AdaptiveDirichlet",
    "DifficultyBudget",
    "EscWindow",
    "FixedSamples",
    "PolicySpec",
    "PredictiveMajority",
    "RuleLike",
    "StopAll",
    "StopAny",
    "StopDecision",
    "StopRule",
    "StoppingRule",
    "Tally",
    "ThresholdRule",
    "Votes",
    "as_rule",
    "beta_sf_half",
    "default_policy",
    "dirichlet_leader_prob",
    "gamma_p",
    "parse_policy",
    "predictive_stay_prob",
    "regularised_beta",
    "votes_of",
]
