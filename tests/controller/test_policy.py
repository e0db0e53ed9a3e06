"""``Policy.stopping``: a rule name or a rule object, checked where the policy is built."""

from __future__ import annotations

import pydantic
import pytest

from retryctl.controller import Policy, Tally
from retryctl.controller.stopping import EscWindow, FixedSamples, StopRule


class TestPolicy:
    def test_a_combined_rule_is_the_policys_rule(self) -> None:
        rule = FixedSamples(n=4) & EscWindow(window=2)
        policy = Policy(stopping=rule)
        assert policy.stopping_rule() is rule
        decision = policy.stopping_rule()(Tally.of(["a", "a"], max_samples=8))
        assert not decision.stop and decision.rule == "(sc-4 & esc-2)"
        assert policy.stopping_rule()(Tally.of(["b", "c", "a", "a"], max_samples=8)).stop

    def test_a_plain_callable_is_wrapped_under_its_name(self) -> None:
        def two_agree(tally: Tally) -> bool:
            return tally.leader_votes >= 2

        rule = Policy(stopping=two_agree).stopping_rule()
        assert isinstance(rule, StopRule) and rule.name == "two_agree"
        assert rule(Tally.of(["x", "x"])).stop and not rule(Tally.of(["x", "y"])).stop

    def test_names_still_build_a_fresh_rule(self) -> None:
        policy = Policy(stopping="esc:4")
        assert policy.stopping == "esc:4" and policy.stopping_rule().name == "esc-4"
        assert policy.stopping_rule() is not policy.stopping_rule()

    @pytest.mark.parametrize(
        ("value", "said"),
        [
            (42, "got int 42"),
            (None, "got NoneType None"),
            (FixedSamples, "got the class FixedSamples, not a rule (build one: FixedSamples(...))"),
            ("best-guess", "unknown policy 'best-guess'"),
        ],
    )
    def test_anything_else_is_refused_naming_stopping(self, value: object, said: str) -> None:
        with pytest.raises(pydantic.ValidationError) as info:
            Policy(stopping=value)  # type: ignore[arg-type]
        [error] = info.value.errors()
        assert error["loc"] == ("stopping",) and said in error["msg"]

    def test_json_names_the_rule(self) -> None:
        policy = Policy(stopping=FixedSamples(n=3) | EscWindow(window=2))
        assert policy.model_dump(mode="json")["stopping"] == "(sc-3 | esc-2)"
        assert Policy(stopping="sc-3").model_dump(mode="json")["stopping"] == "sc-3"
