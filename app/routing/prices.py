"""What a completion cost: the shipped price table, the operator's overrides on top, and the sum.

Prices are data (`prices.yaml`), not code; a model without a price has no cost (None), never a
guessed one. Usage counts overlap by design (cache reads and writes are part of input, reasoning
part of output), so the prompt is split into disjoint kinds first and each token is charged
exactly once, at its kind's rate. Sums are exact (decimal) and rounded to 1e-8 USD.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import date
from decimal import Decimal
from importlib import resources

import yaml
from pydantic import BaseModel, ConfigDict, ValidationError

from app.config import ModelPrice, TokenRates
from app.errors import ConfigurationError
from app.schemas import Usage

WILDCARD = "*"
TOKENS_PER_PRICE_UNIT = 1_000_000
# A millionth of a cent: float noise must not show in records or sums.
_QUANTUM = Decimal("1e-8")
# A snapshot's date at the end of its name: OpenAI's -2024-08-06, Anthropic's -20250929.
_DATED_SUFFIX = re.compile(r"-(?:\d{4}-\d{2}-\d{2}|\d{8})$")


class _Provenance(BaseModel):
    model_config = ConfigDict(extra="forbid")
    source: str
    as_of: date


class _PriceFile(BaseModel):
    """The shipped file: each entry without a source or date of its own takes its provider's."""

    model_config = ConfigDict(extra="forbid")
    provenance: dict[str, _Provenance]
    prices: dict[str, ModelPrice]

    def entries(self) -> dict[str, ModelPrice]:
        found = {}
        for key, price in self.prices.items():
            default = self.provenance.get(key.partition("/")[0])
            source, as_of = price.source, price.as_of
            if default is not None:
                source, as_of = source or default.source, as_of or default.as_of
            if source is None or as_of is None:
                raise ValueError(f"{key!r} says neither where its price is from nor as of when")
            found[key] = price.model_copy(update={"source": source, "as_of": as_of})
        return found


@dataclass(frozen=True, slots=True)
class Cost:
    """What one answer cost, and what the provider's prompt cache changed in it.

    `saved_usd` is what the same tokens would have cost with no prompt cache (every prompt token
    at the input rate) minus what they did cost: negative when cache writes outweighed the reads.
    None when the provider said nothing about its cache.
    """

    usd: float
    saved_usd: float | None


def _usd(charges: Iterable[tuple[int, float]]) -> Decimal:
    """The exact sum of tokens x rate per million (rates through their shortest decimal text)."""
    micro = sum((Decimal(tokens) * Decimal(repr(rate)) for tokens, rate in charges), Decimal(0))
    return micro / TOKENS_PER_PRICE_UNIT


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
            shipped = _PriceFile.model_validate(yaml.safe_load(text)).entries()
        except (yaml.YAMLError, ValidationError, ValueError) as exc:
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

    def cost(self, provider: str, model: str, usage: Usage) -> Cost | None:
        """The cost of one upstream answer; None when the model is unpriced or usage was not
        reported.

        `usage.input_tokens` is the whole prompt: the cache reads (`cached_input_tokens`) and
        writes (`cache_write_tokens`, the 1-hour ones among them `cache_write_1h_tokens`) are
        taken out of it and charged at their own rates, the rest at the input rate. Reasoning
        tokens are inside `output_tokens` already. A prompt over a long-context threshold bills
        the whole request at that tier's rates.
        """
        price = self.price(provider, model)
        if price is None or usage.input_tokens is None or usage.output_tokens is None:
            return None
        prompt = usage.input_tokens
        cached = min(usage.cached_input_tokens or 0, prompt)
        writes = min(usage.cache_write_tokens or 0, prompt - cached)
        writes_1h = min(usage.cache_write_1h_tokens or 0, writes)
        rates: TokenRates = price.rates(prompt)
        output = (usage.output_tokens, rates.output)
        paid = _usd(
            [
                (prompt - cached - writes, rates.input),
                (cached, rates.cached_rate),
                (writes - writes_1h, rates.write_rate),
                (writes_1h, rates.write_1h_rate),
                output,
            ]
        )
        saved = None
        if usage.cached_input_tokens is not None or usage.cache_write_tokens is not None:
            uncached = _usd([(prompt, rates.input), output])
            saved = float((uncached - paid).quantize(_QUANTUM))
        return Cost(usd=float(paid.quantize(_QUANTUM)), saved_usd=saved)
