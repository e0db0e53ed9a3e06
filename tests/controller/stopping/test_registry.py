"""Policy names parse into the right rules; bad names and parameters are clear errors."""

from __future__ import annotations

import pytest

from retryctl.controller.stopping import (
    BUILTIN_POLICIES,
    KNOWN_POLICIES,
    AdaptiveBeta,
    AdaptiveDirichlet,
    ConfidenceWeighted,
    DifficultyBudget,
    EscWindow,
    FixedSamples,
    PredictiveCut,
    PredictiveMajority,
    ThresholdRule,
    default_stopping_rule,
    parse_stopping_rule,
)
from retryctl.exceptions import ConfigError, UnknownPolicyError


class TestParsePolicy:
    @pytest.mark.parametrize(
        ("name", "kind"),
        [
            ("default", PredictiveCut),
            ("weighted", ConfidenceWeighted),
            ("predictive", PredictiveMajority),
            ("sc-40", FixedSamples),
            ("esc", EscWindow),
            ("ac-beta", AdaptiveBeta),
            ("ac-dirichlet", AdaptiveDirichlet),
            ("threshold", ThresholdRule),
            ("budget", DifficultyBudget),
            ("AC-Beta", AdaptiveBeta),
        ],
    )
    def test_builtin_names(self, name: str, kind: type) -> None:
        assert isinstance(parse_stopping_rule(name).build(), kind)

    def test_parameters(self) -> None:
        beta = parse_stopping_rule("ac-beta:0.99").build()
        assert isinstance(beta, AdaptiveBeta) and beta.threshold == 0.99
        assert parse_stopping_rule("sc-7").build() == FixedSamples(n=7)
        assert parse_stopping_rule("esc:8").build() == EscWindow(window=8)
        assert parse_stopping_rule("threshold:0.9").build() == ThresholdRule(agreement=0.9)
        assert parse_stopping_rule("default:0.99").build() == PredictiveCut(threshold=0.99)
        assert parse_stopping_rule("weighted:0.99").build() == ConfidenceWeighted(threshold=0.99)
        assert parse_stopping_rule("predictive:0.99").build() == PredictiveMajority(threshold=0.99)
        assert parse_stopping_rule("budget:5").build() == DifficultyBudget(probe=5, easy_max=5)

    def test_unknown_lists_known_names(self) -> None:
        with pytest.raises(UnknownPolicyError) as info:
            parse_stopping_rule("magic")
        for known in KNOWN_POLICIES:
            assert known in str(info.value)

    @pytest.mark.parametrize(
        ("name", "field"),
        [("ac-beta:1.5", "threshold"), ("sc-0", "n"), ("esc:0", "window"), ("esc:x", "policy")],
    )
    def test_bad_parameters_name_the_field(self, name: str, field: str) -> None:
        with pytest.raises(ConfigError) as info:
            parse_stopping_rule(name)
        assert info.value.field == field

    def test_sweeps_stay_in_the_family(self) -> None:
        assert parse_stopping_rule("ac-beta").sweep()[0] == "ac-beta:0.8"
        assert "sc-40" in parse_stopping_rule("sc-5").sweep()
        for name in BUILTIN_POLICIES:
            for swept in parse_stopping_rule(name).sweep():
                parse_stopping_rule(swept)

    def test_default_policy_is_the_documented_one(self) -> None:
        assert default_stopping_rule() == PredictiveCut(threshold=0.975, prior=0.5, warmup=2)
