"""The shape of one model's price: a rate per kind of token, an optional long-context tier, and
where the figures came from. The table itself is data (`app/routing/prices.yaml`)."""

from __future__ import annotations

from datetime import date

from pydantic import BaseModel, ConfigDict, Field, model_validator


class TokenRates(BaseModel):
    """USD per million tokens of each kind. A kind without a rate of its own is charged as plain
    input (`cache_write_1h` as `cache_write` first): a missing discount is never guessed."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    input: float = Field(
        ge=0, description="Prompt tokens neither read from nor written to a cache."
    )
    cached_input: float | None = Field(
        default=None,
        ge=0,
        description="Prompt tokens read from the provider's cache; default: the input price.",
    )
    cache_write: float | None = Field(
        default=None,
        ge=0,
        description="Prompt tokens written to the cache (Anthropic's 5-minute writes); default: "
        "the input price (OpenAI writes cost nothing extra).",
    )
    cache_write_1h: float | None = Field(
        default=None,
        ge=0,
        description="Prompt tokens written to the cache for one hour (Anthropic); default: the "
        "cache_write price.",
    )
    output: float = Field(
        ge=0, description="Completion tokens; reasoning tokens are among them, billed the same."
    )

    @property
    def cached_rate(self) -> float:
        return self.input if self.cached_input is None else self.cached_input

    @property
    def write_rate(self) -> float:
        return self.input if self.cache_write is None else self.cache_write

    @property
    def write_1h_rate(self) -> float:
        return self.write_rate if self.cache_write_1h is None else self.cache_write_1h


class LongContextPrice(TokenRates):
    """Rates for a request whose whole prompt (cache reads and writes included) is longer than
    `threshold` tokens: every token of that request is billed at them, not just the excess."""

    threshold: int = Field(gt=0, description="Prompt tokens above which these rates apply.")


class ModelPrice(TokenRates):
    """One model's rates, a long-context tier where the provider has one, and their provenance.

    `source` and `as_of` say where the figures were read and when; the shipped table fills them
    per provider, an operator's override may leave them out.
    """

    long_context: LongContextPrice | None = None
    source: str | None = Field(default=None, description="Where the prices were published.")
    as_of: date | None = Field(default=None, description="When they were read there.")

    @model_validator(mode="after")
    def _tier_prices_every_kind(self) -> ModelPrice:
        """A long-context tier that left out a kind the base prices would charge that kind at
        the tier's input rate, silently: refused instead."""
        tier = self.long_context
        if tier is not None:
            for kind in ("cached_input", "cache_write", "cache_write_1h"):
                if getattr(self, kind) is not None and getattr(tier, kind) is None:
                    raise ValueError(f"long_context must price {kind} too, as the base does")
        return self

    def rates(self, prompt_tokens: int) -> TokenRates:
        """The rates a request with this many prompt tokens is billed at."""
        tier = self.long_context
        return tier if tier is not None and prompt_tokens > tier.threshold else self
