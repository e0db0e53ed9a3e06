"""Policy names, as the CLI and configs spell them: ``default``, ``predictive``, ``sc-N``, ``esc``, ...

A name may carry one parameter after a colon, the knob a sweep turns: ``ac-beta:0.99`` (threshold),
``default:0.99``, ``predictive:0.99`` and ``weighted:0.99`` (threshold), ``esc:8`` (window), ``threshold:0.9``
(agreement), ``budget:2`` (probe).
``sc-N`` carries its knob in the name.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from retryctl.controller.stopping._adaptive import (
    AdaptiveBeta,
    AdaptiveDirichlet,
    PredictiveMajority,
)
from retryctl.controller.stopping._base import StopRule
from retryctl.controller.stopping._default import PredictiveCut
from retryctl.controller.stopping._simple import (
    DifficultyBudget,
    EscWindow,
    FixedSamples,
    ThresholdRule,
)
from retryctl.controller.stopping._weighted import ConfidenceWeighted
from retryctl.exceptions import ConfigError, UnknownPolicyError

__all__ = [
    "BUILTIN_POLICIES",
    "KNOWN_POLICIES",
    "StoppingRuleSpec",
    "default_stopping_rule",
    "parse_stopping_rule",
]

KNOWN_POLICIES = [
    "default", "predictive", "sc-N", "esc", "ac-beta", "ac-dirichlet", "threshold", "budget", "weighted",
]  # fmt: skip
"""Every name :func:`parse_stopping_rule` accepts (``sc-N`` with N a positive integer)."""

BUILTIN_POLICIES = ["default", "predictive", "sc-40", "esc", "ac-beta", "ac-dirichlet", "threshold", "budget"]
"""One concrete name per built-in policy, as benchmarks list them."""

_SC = re.compile(r"sc-(\d+)")


@dataclass(frozen=True)
class StoppingRuleSpec:
    """A parsed name: the family, its parameter (``None`` = the family's default) and the sweep."""

    family: str
    """``default``, ``predictive``, ``weighted``, ``sc``, ``esc``, ``ac-beta``, ``ac-dirichlet``,
    ``threshold`` or ``budget``."""
    param: float | None
    """The knob's value, or ``None`` for the family default."""

    def build(self) -> StopRule:
        """The rule this spec names."""
        return _FAMILIES[self.family].build(self.param)

    def sweep(self) -> list[str]:
        """Names of the same family along its knob, for accuracy-vs-samples curves."""
        family = _FAMILIES[self.family]
        if self.family == "sc":
            return [f"sc-{int(v)}" for v in family.sweep]
        return [f"{self.family}:{v:g}" for v in family.sweep]


@dataclass(frozen=True)
class _Family:
    build: Callable[[float | None], StopRule]
    sweep: tuple[float, ...]
    integer: bool


def _as_int(param: float | None, default: int) -> int:
    return default if param is None else int(param)


_FAMILIES: dict[str, _Family] = {
    "default": _Family(
        lambda p: PredictiveCut() if p is None else PredictiveCut(threshold=p),
        (0.8, 0.9, 0.95, 0.975, 0.99, 0.995),
        integer=False,
    ),
    "weighted": _Family(
        lambda p: ConfidenceWeighted() if p is None else ConfidenceWeighted(threshold=p),
        (0.8, 0.9, 0.95, 0.975, 0.99, 0.995),
        integer=False,
    ),
    "predictive": _Family(
        lambda p: PredictiveMajority() if p is None else PredictiveMajority(threshold=p),
        (0.8, 0.9, 0.95, 0.975, 0.99, 0.995),
        integer=False,
    ),
    "sc": _Family(lambda p: FixedSamples(n=_as_int(p, 40)), (1, 3, 5, 8, 10, 15, 20, 40), integer=True),
    "esc": _Family(lambda p: EscWindow(window=_as_int(p, 5)), (2, 3, 4, 5, 6, 8, 10), integer=True),
    "ac-beta": _Family(
        lambda p: AdaptiveBeta() if p is None else AdaptiveBeta(threshold=p),
        (0.8, 0.9, 0.95, 0.975, 0.99, 0.995),
        integer=False,
    ),
    "ac-dirichlet": _Family(
        lambda p: AdaptiveDirichlet() if p is None else AdaptiveDirichlet(threshold=p),
        (0.8, 0.9, 0.95, 0.975, 0.99, 0.995),
        integer=False,
    ),
    "threshold": _Family(
        lambda p: ThresholdRule() if p is None else ThresholdRule(agreement=p),
        (0.5, 0.6, 0.7, 0.8, 0.9, 1.0),
        integer=False,
    ),
    # The budget's knob is the probe length; an all-agreeing probe stops right there (easy_max = probe).
    "budget": _Family(
        lambda p: DifficultyBudget() if p is None else DifficultyBudget(probe=int(p), easy_max=int(p)),
        (1, 2, 3, 4, 5),
        integer=True,
    ),
}


def _parse(name: str) -> StoppingRuleSpec:
    text = name.strip().lower()
    base, sep, raw = text.partition(":")
    match = _SC.fullmatch(base)
    if match:
        if sep:
            raise ConfigError(field="policy", value=name, problem="sc-N takes no ':' parameter")
        return StoppingRuleSpec("sc", float(match.group(1)))
    if base not in _FAMILIES or base == "sc":
        raise UnknownPolicyError(name=name, known=KNOWN_POLICIES)
    if not sep:
        return StoppingRuleSpec(base, None)
    family = _FAMILIES[base]
    try:
        value = float(int(raw)) if family.integer else float(raw)
    except ValueError:
        kind = "an integer" if family.integer else "a number"
        raise ConfigError(
            field="policy", value=name, problem=f"the parameter after ':' must be {kind}"
        ) from None
    return StoppingRuleSpec(base, value)


def parse_stopping_rule(name: str) -> StoppingRuleSpec:
    """Parse and validate ``name`` (the rule is built once to check its parameter).

    Raises :class:`UnknownPolicyError` for an unknown family and :class:`ConfigError` for a bad
    parameter (naming the rule's field, e.g. ``threshold``).
    """
    if not isinstance(name, str):  # e.g. a number from a YAML config: not an AttributeError
        raise ConfigError(field="policy", value=name, problem="must be a policy name (a string)")
    spec = _parse(name)
    spec.build()
    return spec


def default_stopping_rule() -> StopRule:
    """The default stopping policy (:class:`PredictiveCut` with its documented parameters: it is
    :class:`PredictiveMajority` where samples carry no token logprobs, so nothing is cut)."""
    return PredictiveCut()
