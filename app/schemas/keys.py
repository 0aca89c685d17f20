"""API keys and teams as operators manage them: scopes, budgets, rate limits, allowlists, expiry,
and the spend a key or team has against its limits.

Limit fields are flat on the wire (`budget_usd`, `budget_window`, `rpm`, …) because that is what
`genai keys create` and curl users type; several budget windows at once go in `budgets`.
"""

from __future__ import annotations

import datetime as dt
import math
from typing import Annotated, Any, Literal, Self

from pydantic import Field, WithJsonSchema, field_validator, model_validator

from app.schemas.base import FrozenModel, InputModel

KeyScope = Literal["complete", "admin"]
BudgetWindow = Literal["day", "month", "total"]
"""`day` and `month` are UTC calendar periods (they reset at 00:00 UTC and on the 1st); `total`
never resets."""

TEAM_NAME = r"^[a-z0-9][a-z0-9_.-]{0,63}$"
KEY_NAME = r"^[A-Za-z0-9][A-Za-z0-9 _.@-]{0,99}$"
# Globs take `*` (any run of characters) and `?` (one character); no classes, so none is malformed.
MODEL_GLOB = r"^[A-Za-z0-9*?][A-Za-z0-9._:*?@-]{0,63}/[A-Za-z0-9*?][A-Za-z0-9._:/*?@-]{0,199}$"
PATTERN_GLOB = r"^[A-Za-z0-9*?][A-Za-z0-9_.:/*?@-]{0,199}$"
# In the document too (a pattern per item), so a generated client refuses what the API refuses.
ModelGlob = Annotated[
    str, Field(pattern=MODEL_GLOB, description="`provider/model`, e.g. openai/gpt-4o*")
]
PatternGlob = Annotated[str, Field(pattern=PATTERN_GLOB, description="e.g. support-*")]
MAX_BUDGET_USD = 1_000_000.0
MAX_GLOBS = 100


class Budget(FrozenModel):
    """At most `usd` dollars spent per `window`."""

    usd: float = Field(gt=0, le=MAX_BUDGET_USD, allow_inf_nan=False, description="USD per window.")
    window: BudgetWindow


class RateLimits(FrozenModel):
    rpm: int | None = Field(default=None, ge=1, le=1_000_000, description="Requests per minute.")
    tpm: int | None = Field(
        default=None, ge=1, le=1_000_000_000, description="Tokens (input + output) per minute."
    )


class Limits(RateLimits):
    """What a key or a team may spend and how fast; empty: unlimited."""

    budgets: list[Budget] = Field(default_factory=list, max_length=3)

    @property
    def empty(self) -> bool:
        return not self.budgets and self.rpm is None and self.tpm is None


class Allowlists(FrozenModel):
    """What a key may use; None: anything."""

    allowed_models: list[str] | None = None
    allowed_patterns: list[str] | None = None


def _unique_windows(budgets: list[Budget]) -> list[Budget]:
    windows = [budget.window for budget in budgets]
    if len(set(windows)) != len(windows):
        raise ValueError("each budget window may appear once")
    return sorted(budgets, key=lambda budget: ("day", "month", "total").index(budget.window))


class _LimitInput(InputModel):
    """Budget and rate-limit fields as callers send them, for keys and teams alike."""

    budget_usd: float | None = Field(
        default=None,
        gt=0,
        le=MAX_BUDGET_USD,
        allow_inf_nan=False,
        description="A budget in USD for `budget_window` (default `month`).",
    )
    budget_window: BudgetWindow | None = Field(
        default=None, description="day | month | total; UTC calendar periods."
    )
    budgets: list[Budget] | None = Field(
        default=None, max_length=3, description="Several budgets at once, one per window."
    )
    rpm: int | None = Field(default=None, ge=1, le=1_000_000, description="Requests per minute.")
    tpm: int | None = Field(
        default=None, ge=1, le=1_000_000_000, description="Tokens per minute (input + output)."
    )

    @model_validator(mode="after")
    def _one_budget_spelling(self) -> Self:
        if self.budget_window is not None and self.budget_usd is None:
            raise ValueError("budget_window needs budget_usd")
        if self.budget_usd is not None and not math.isfinite(self.budget_usd):
            raise ValueError("budget_usd must be a finite number")
        _unique_windows(self.budget_list() or [])
        return self

    def budget_list(self) -> list[Budget] | None:
        """Every budget the input names (None: it names none)."""
        if self.budget_usd is None and self.budgets is None:
            return None
        found = list(self.budgets or [])
        if self.budget_usd is not None:
            found.append(Budget(usd=self.budget_usd, window=self.budget_window or "month"))
        return _unique_windows(found)

    def changes(self) -> dict[str, Any]:
        """The stored fields this input sets, by their names on the Info models: only what the
        caller sent (a PATCH changes what it names; `null` removes a limit), and any budget
        field replaces the whole budget list."""
        sent = self.model_fields_set
        found: dict[str, Any] = {}
        if sent & {"budget_usd", "budget_window", "budgets"}:
            found["budgets"] = [budget.model_dump() for budget in self.budget_list() or []]
        found.update({name: getattr(self, name) for name in ("rpm", "tpm") if name in sent})
        return found


class _AccessInput(_LimitInput):
    allowed_models: list[ModelGlob] | None = Field(
        default=None,
        max_length=MAX_GLOBS,
        description="`provider/model` globs (`*`, `?`) the key may call; absent: any model.",
    )
    allowed_patterns: list[PatternGlob] | None = Field(
        default=None,
        max_length=MAX_GLOBS,
        description="Pattern-name globs the key may render (`template:NAME` for a database "
        "template); absent: any pattern.",
    )
    expires_at: dt.datetime | None = Field(
        default=None, description="After this instant the key is refused (401)."
    )
    team: str | None = Field(
        default=None, pattern=TEAM_NAME, description="The team whose limits apply as well."
    )

    def changes(self) -> dict[str, Any]:
        sent = self.model_fields_set
        fields = ("allowed_models", "allowed_patterns", "expires_at", "team")
        return {
            **super().changes(),
            **{name: getattr(self, name) for name in fields if name in sent},
        }

    @field_validator("allowed_models", "allowed_patterns")
    @classmethod
    def _distinct(cls, globs: list[str] | None) -> list[str] | None:
        return None if globs is None else list(dict.fromkeys(globs))

    @field_validator("expires_at")
    @classmethod
    def _aware(cls, when: dt.datetime | None) -> dt.datetime | None:
        if when is not None and when.tzinfo is None:
            raise ValueError("expires_at needs a time zone (e.g. 2027-01-01T00:00:00Z)")
        return None if when is None else when.astimezone(dt.UTC)  # as it reads back


class ApiKeyCreate(_AccessInput):
    """A new API key: `complete` renders, completes and reads the catalog; `admin` does all."""

    scope: KeyScope
    name: str = Field(default="unnamed", pattern=KEY_NAME, description="A label.")


class ApiKeyUpdate(_AccessInput):
    """A change to a key's name or limits: only the fields sent change; `null` removes a limit."""

    # Not nullable in the document: a key keeps a name (absent: unchanged).
    name: Annotated[
        str | None, WithJsonSchema({"type": "string", "pattern": KEY_NAME, "title": "Name"})
    ] = Field(default=None, pattern=KEY_NAME)

    @field_validator("name")
    @classmethod
    def _named(cls, name: str | None) -> str:
        if name is None:  # only an explicit null gets here
            raise ValueError("a key keeps a name; send a new one or leave `name` out")
        return name

    def changes(self) -> dict[str, Any]:
        return {
            **super().changes(),
            **({"name": self.name} if "name" in self.model_fields_set else {}),
        }


class ApiKeyInfo(Allowlists, Limits):
    """A stored key as anyone may see it: never the key itself, which is not kept."""

    id: str = Field(description="The public part of the key (`gsk_<id>_…`).")
    name: str
    scope: KeyScope
    team: str | None = None
    expires_at: dt.datetime | None = None
    created_at: dt.datetime
    last_used_at: dt.datetime | None
    revoked_at: dt.datetime | None


class ApiKeyCreated(ApiKeyInfo):
    key: str = Field(description="The key to send as `Authorization: Bearer …`; shown only once.")


class TeamCreate(_LimitInput):
    """A team: its keys share its budgets and rate limits, on top of their own."""

    name: str = Field(pattern=TEAM_NAME)


class TeamUpdate(_LimitInput):
    """A change to a team's limits: only the fields sent change; `null` removes a limit."""


class TeamInfo(Limits):
    name: str
    created_at: dt.datetime
    updated_at: dt.datetime


class WindowSpend(FrozenModel):
    """Spend in the current period of one budget window."""

    window: BudgetWindow
    budget_usd: float
    spent_usd: float = Field(description="Settled cost plus what calls in flight have reserved.")
    remaining_usd: float
    resets_at: dt.datetime | None = Field(description="When the window starts over; null: never.")


class RateUse(FrozenModel):
    """Use in the current minute against a rate limit."""

    limit: int
    used: int
    resets_at: dt.datetime


class LimitStatus(FrozenModel):
    """A key's or a team's limits and where it stands against them now."""

    budgets: list[WindowSpend] = Field(default_factory=list)
    rpm: RateUse | None = None
    tpm: RateUse | None = None


class KeyStatus(FrozenModel):
    """`GET /v1/keys/me`: the calling key, its limits and spend, and its team's."""

    key: ApiKeyInfo
    limits: LimitStatus
    team: TeamInfo | None = None
    team_limits: LimitStatus | None = None
