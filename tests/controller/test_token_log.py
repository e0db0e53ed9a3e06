"""The policy's ``token_log`` knob: its default, and bad values refused naming the field."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from retryctl import Policy
from retryctl.controller import TokenLog


class TestTokenLog:
    def test_the_default_logs_every_candidates_first_64_tokens(self) -> None:
        assert Policy().token_log == TokenLog(keep="all", max_tokens=64)
        assert Policy().token_log.on and not TokenLog(keep="off").on

    def test_a_dict_is_accepted(self) -> None:
        policy = Policy.model_validate({"token_log": {"keep": "accepted", "max_tokens": 8}})
        assert policy.token_log == TokenLog(keep="accepted", max_tokens=8)

    @pytest.mark.parametrize(
        ("value", "field"),
        [({"keep": "some"}, "keep"), ({"max_tokens": 0}, "max_tokens"), ({"tokens": 3}, "tokens")],
    )
    def test_a_bad_value_names_its_field(self, value: dict[str, object], field: str) -> None:
        with pytest.raises(ValidationError) as caught:
            Policy.model_validate({"token_log": value})
        assert caught.value.errors()[0]["loc"] == ("token_log", field)
        assert f"token_log.{field}" in str(caught.value)

    @pytest.mark.parametrize("keep", ["off", "accepted", "all"])
    def test_a_string_is_short_for_keep(self, keep: str) -> None:
        assert Policy.model_validate({"token_log": keep}).token_log == TokenLog(keep=keep)  # type: ignore[arg-type]

    def test_a_bad_string_names_token_log_keep(self) -> None:
        with pytest.raises(ValidationError) as caught:
            Policy.model_validate({"token_log": "none"})
        assert caught.value.errors()[0]["loc"] == ("token_log", "keep")

    def test_max_tokens_as_a_string_is_refused(self) -> None:
        with pytest.raises(ValidationError) as caught:
            TokenLog.model_validate({"max_tokens": "64"})
        assert caught.value.errors()[0]["loc"] == ("max_tokens",)

    def test_built_directly_the_error_names_keep(self) -> None:
        with pytest.raises(ValidationError) as caught:
            TokenLog.model_validate({"keep": "none"})
        assert caught.value.errors()[0]["loc"] == ("keep",)
