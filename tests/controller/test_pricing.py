"""The per-model price table."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from retryctl.controller._budget import Usage
from retryctl.controller._pricing import ModelPrice, PriceTable
from retryctl.exceptions import ConfigError


class TestModelPrice:
    def test_cost_is_per_million_tokens(self):
        price = ModelPrice(input_per_mtok=2.0, output_per_mtok=8.0)
        # 1M input tokens at $2/M is $2; 500k output tokens at $8/M is $4.
        assert price.cost(input_tokens=1_000_000, output_tokens=500_000) == pytest.approx(6.0)
        assert price.cost(input_tokens=0, output_tokens=0) == 0.0

    @pytest.mark.parametrize("name", ["input_per_mtok", "output_per_mtok"])
    def test_negative_price_names_the_field(self, name):
        fields = {"input_per_mtok": 1.0, "output_per_mtok": 1.0, name: -0.5}
        with pytest.raises(ValidationError) as info:
            ModelPrice(**fields)
        assert info.value.errors()[0]["loc"] == (name,)

    def test_negative_tokens_are_refused(self):
        with pytest.raises(ConfigError, match="output_tokens"):
            ModelPrice(input_per_mtok=1, output_per_mtok=1).cost(input_tokens=1, output_tokens=-2)


class TestPriceTable:
    def test_prices_a_listed_model(self):
        table = PriceTable.of({"gpt-x": (0.5, 1.5)})
        assert table.cost("gpt-x", input_tokens=2000, output_tokens=1000) == pytest.approx(
            (2000 * 0.5 + 1000 * 1.5) / 1e6
        )

    def test_unknown_model_is_an_error_naming_it(self):
        table = PriceTable.of({"gpt-x": (0.5, 1.5)}, local=("smollm2",))
        with pytest.raises(ConfigError) as info:
            table.cost("mystery-7b", input_tokens=1, output_tokens=1)
        assert info.value.value == "mystery-7b"
        assert "mystery-7b" in str(info.value) and "gpt-x" in str(info.value)

    def test_default_prices_unknown_models(self):
        table = PriceTable.of({"gpt-x": (0.5, 1.5)}, default=(10.0, 20.0))
        assert table.cost("other", input_tokens=100_000, output_tokens=0) == pytest.approx(1.0)
        assert table.cost("gpt-x", input_tokens=100_000, output_tokens=0) == pytest.approx(0.05)

    def test_local_models_are_free(self):
        table = PriceTable.of(local=("smollm2-135m",), default=(10.0, 20.0))
        assert table.cost("smollm2-135m", input_tokens=10**6, output_tokens=10**6) == 0.0

    def test_a_model_both_local_and_priced_is_refused(self):
        with pytest.raises(ValidationError, match="local"):
            PriceTable.of({"m": (1, 1)}, local=("m",))

    def test_estimate_is_the_upper_bound_of_one_call(self):
        table = PriceTable.of({"m": (1.0, 4.0)})
        est = table.estimate("m", input_tokens=1000, max_output_tokens=200, samples=5, wall_s=30)
        # The prompt once, up to 200 tokens for each of 5 samples.
        expected_usd = (1000 * 1.0 + 5 * 200 * 4.0) / 1e6
        assert est.usd == pytest.approx(expected_usd)
        assert est.model_copy(update={"usd": 0.0}) == Usage(
            attempts=1, samples=5, input_tokens=1000, output_tokens=1000, wall_s=30
        )

    def test_is_frozen_and_documented(self):
        table = PriceTable.of({"m": (1.0, 4.0)})
        with pytest.raises(ValidationError):
            table.default = None
        for model in (PriceTable, ModelPrice):
            for name, info in model.model_fields.items():
                assert info.description, name
