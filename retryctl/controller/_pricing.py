"""What a model call costs in US dollars: a per-model price per million input and output tokens.

Prices change and differ by account, so retryctl ships no built-in prices: the user states them (or a
``default`` for every unlisted model). Local models (embedded llama.cpp, replayed banks) cost nothing and
are listed in ``local``.
"""

from __future__ import annotations

from collections.abc import Mapping

from pydantic import BaseModel, ConfigDict, Field, model_validator

from retryctl.controller._budget import Usage
from retryctl.exceptions import ConfigError

__all__ = ["ModelPrice", "PriceTable"]

_PER = 1_000_000


class ModelPrice(BaseModel):
    """The price of one model in US dollars per million tokens."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False, use_attribute_docstrings=True)

    input_per_mtok: float = Field(ge=0)
    """USD per 1,000,000 prompt tokens."""
    output_per_mtok: float = Field(ge=0)
    """USD per 1,000,000 completion tokens."""

    def cost(self, *, input_tokens: int, output_tokens: int) -> float:
        """USD for a call with these token counts."""
        if input_tokens < 0 or output_tokens < 0:
            field = "input_tokens" if input_tokens < 0 else "output_tokens"
            value = min(input_tokens, output_tokens)
            raise ConfigError(field=field, value=value, problem="a token count cannot be negative")
        return (input_tokens * self.input_per_mtok + output_tokens * self.output_per_mtok) / _PER


_FREE = ModelPrice(input_per_mtok=0.0, output_per_mtok=0.0)


class PriceTable(BaseModel):
    """Prices by model name; ``cost(model, input_tokens=..., output_tokens=...)`` is the USD of a call.

    An unlisted model is a :class:`~retryctl.exceptions.ConfigError` naming it, unless ``default`` is set.
    """

    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)

    prices: Mapping[str, ModelPrice] = Field(default_factory=dict)
    """Price per model name, exactly as the backend reports the model."""
    local: frozenset[str] = frozenset()
    """Models that run on this machine and cost 0 USD (they still count tokens and time)."""
    default: ModelPrice | None = None
    """The price of any model not in ``prices`` or ``local``; ``None`` makes an unknown model an error."""

    @model_validator(mode="after")
    def _no_model_twice(self) -> PriceTable:
        both = sorted(set(self.prices) & self.local)
        if both:
            raise ValueError(f"local: model(s) {both} are also priced in prices; list each once")
        return self

    @classmethod
    def of(
        cls,
        prices: Mapping[str, tuple[float, float]] | None = None,
        *,
        local: tuple[str, ...] | frozenset[str] = (),
        default: tuple[float, float] | None = None,
    ) -> PriceTable:
        """A table from ``{model: (usd_per_mtok_in, usd_per_mtok_out)}``."""

        def price(pair: tuple[float, float]) -> ModelPrice:
            return ModelPrice(input_per_mtok=pair[0], output_per_mtok=pair[1])

        return cls(
            prices={m: price(p) for m, p in (prices or {}).items()},
            local=frozenset(local),
            default=None if default is None else price(default),
        )

    def price(self, model: str) -> ModelPrice:
        """The price of ``model``; a ConfigError naming it if it is unknown and there is no default."""
        if model in self.local:
            return _FREE
        found = self.prices.get(model, self.default)
        if found is None:
            known = ", ".join(sorted([*self.prices, *self.local])) or "none"
            raise ConfigError(
                field="model",
                value=model,
                problem=f"no price for this model (known: {known}); add it or set a default price",
            )
        return found

    def cost(self, model: str, *, input_tokens: int, output_tokens: int) -> float:
        """USD for one call of ``model`` with these token counts."""
        return self.price(model).cost(input_tokens=input_tokens, output_tokens=output_tokens)

    def estimate(
        self,
        model: str,
        *,
        input_tokens: int,
        max_output_tokens: int,
        samples: int = 1,
        wall_s: float = 0.0,
    ) -> Usage:
        """The upper-bound :class:`Usage` of one call drawing ``samples`` candidates, to reserve.

        The prompt counts once, as chat APIs bill one call with ``n > 1``; reserve one estimate per
        call when the samples come from separate calls.
        """
        tokens_in = input_tokens
        tokens_out = max_output_tokens * samples
        return Usage(
            attempts=1,
            samples=samples,
            input_tokens=tokens_in,
            output_tokens=tokens_out,
            usd=self.cost(model, input_tokens=tokens_in, output_tokens=tokens_out),
            wall_s=wall_s,
        )
