"""What a completion cost: the shipped price table, the operator's overrides on top, and the sum.

Prices are data (`prices.yaml`), not code; a model without a price has no cost (None), never a
guessed one. Usage counts overlap by design (cached input is part of input, reasoning part of
output), so each token is charged exactly once.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from importlib import resources

import yaml
from pydantic import BaseModel, ConfigDict, ValidationError

from app.config import ModelPrice
from app.errors import ConfigurationError
from app.schemas import Usage

WILDCARD = "*"
TOKENS_PER_PRICE_UNIT = 1_000_000
# A snapshot's date at the end of its name: OpenAI's -2024-08-06, Anthropic's -20250929.
_DATED_SUFFIX = re.compile(r"-(?:\d{4}-\d{2}-\d{2}|\d{8})$")


class _PriceFile(BaseModel):
    model_config = ConfigDict(extra="forbid")
    prices: dict[str, ModelPrice]


def _check_key(key: str, origin: str) -> None:
    provider, slash, model = key.partition("/")
    malformed = not (provider and slash and model) or WILDCARD in provider
    if malformed or (WILDCARD in model and model != WILDCARD):
        raise ConfigurationError(
            origin, f"{key!r} is not a price key; use provider/model or provider/*"
        )


class PriceTable:
    """Prices by `provider/model`, found exactly, by undated name, or by the provider's `*`."""

    def __init__(self, prices: Mapping[str, ModelPrice]) -> None:
        self._prices = dict(prices)

    @classmethod
    def load(cls, overrides: Mapping[str, ModelPrice] | None = None) -> PriceTable:
        """The shipped table with `overrides` (Settings.prices) replacing or adding entries.

        Raises ConfigurationError for a malformed key, at start rather than per request.
        """
        text = resources.files("app.routing").joinpath("prices.yaml").read_text(encoding="utf-8")
        try:
            shipped = _PriceFile.model_validate(yaml.safe_load(text)).prices
        except (yaml.YAMLError, ValidationError) as exc:
            raise ConfigurationError("app/routing/prices.yaml", str(exc)) from None
        for key in shipped:
            _check_key(key, "app/routing/prices.yaml")
        for key in overrides or {}:
            _check_key(key, "prices")
        return cls({**shipped, **(overrides or {})})

    def price(self, provider: str, model: str) -> ModelPrice | None:
        exact = self._prices.get(f"{provider}/{model}")
        if exact is not None:
            return exact
        undated = _DATED_SUFFIX.sub("", model)
        if undated != model and (found := self._prices.get(f"{provider}/{undated}")) is not None:
            return found
        return self._prices.get(f"{provider}/{WILDCARD}")

    def cost_usd(self, provider: str, model: str, usage: Usage) -> float | None:
        """USD for one upstream answer; None when the model is unpriced or usage was not reported.

        `usage.input_tokens` is every prompt token; the `cached_input_tokens` among them are charged
        at the cached rate instead of the input rate, and reasoning tokens are inside
        `output_tokens` already.
        """
        price = self.price(provider, model)
        if price is None or usage.input_tokens is None or usage.output_tokens is None:
            return None
        cached = min(usage.cached_input_tokens or 0, usage.input_tokens)
        cached_rate = price.input if price.cached_input is None else price.cached_input
        micro_dollars = (
            (usage.input_tokens - cached) * price.input
            + cached * cached_rate
            + usage.output_tokens * price.output
        )
        # Rounded to a millionth of a cent: float noise must not show in records or sums.
        return round(micro_dollars / TOKENS_PER_PRICE_UNIT, 8)
