"""The tool registry and its equivalence groups, as the controller's switch verdict walks them."""

from __future__ import annotations

import pytest
from langchain_core.tools import tool

from retryctl.exceptions import ConfigError
from retryctl.tools import ToolRegistry, default_registry


@tool
def alpha(q: str) -> str:
    """First."""
    return q


@tool
def beta(q: str) -> str:
    """Second."""
    return q


@tool
def gamma(q: str) -> str:
    """Third."""
    return q


def registry() -> ToolRegistry:
    return ToolRegistry([alpha, beta, gamma], groups={"search": ["alpha", "beta", "gamma"]})


class TestToolRegistry:
    def test_alternatives_wrap_round_and_skip(self):
        reg = registry()
        assert reg.alternatives("alpha") == ("beta", "gamma")
        assert reg.alternatives("beta") == ("gamma", "alpha")
        assert reg.alternatives("beta", unavailable={"gamma"}) == ("alpha",)
        assert reg.alternatives("beta", tried=["alpha"], unavailable=["gamma"]) == ()

    def test_next_after(self):
        reg = registry()
        assert reg.next_after("alpha") == "beta"
        assert reg.next_after("alpha", unavailable=["beta"]) == "gamma"
        assert reg.next_after("alpha", unavailable=["beta", "gamma"]) is None

    def test_tool_in_no_group_has_no_alternative(self):
        reg = ToolRegistry([alpha, beta])
        assert reg.next_after("alpha") is None

    def test_ambiguous_membership_needs_a_group(self):
        reg = ToolRegistry([alpha, beta, gamma], groups={"a": ["alpha", "beta"], "b": ["gamma", "alpha"]})
        with pytest.raises(ConfigError, match="name one"):
            reg.next_after("alpha")
        assert reg.next_after("alpha", group="b") == "gamma"

    @pytest.mark.parametrize(
        ("groups", "field"),
        [
            ({"g": ["alpha", "nope"]}, "groups['g']"),
            ({"g": ["alpha", "alpha"]}, "groups['g']"),
            ({"g": ["alpha"]}, "groups['g']"),
        ],
    )
    def test_bad_groups_name_the_field(self, groups, field):
        with pytest.raises(ConfigError) as err:
            ToolRegistry([alpha, beta], groups=groups)
        assert err.value.field == field

    def test_duplicate_and_unknown_keys(self):
        reg = registry()
        with pytest.raises(ConfigError):
            reg.register(alpha)
        with pytest.raises(ConfigError) as err:
            reg.get("zeta")
        assert err.value.field == "key"
        assert reg.keys() == ["alpha", "beta", "gamma"] and len(reg.tools()) == 3


class TestDefaultRegistry:
    def test_arithmetic_group(self):
        reg = default_registry()
        assert reg.group("arithmetic") == ("calculator", "python")
        assert reg.next_after("calculator") == "python"
        assert reg.next_after("python") == "calculator"
        assert reg.next_after("calculator", unavailable=["python"]) is None
