"""Usage and cost over a time window, grouped by who asked and what was called: the question
(UsageQuery, shared by `GET /v1/usage` and `genai usage`) and its answer (UsageReport).

The query's rules (dimensions, window defaults and bounds, filter alphabets) live here once, so
the API and the CLI refuse the same inputs with the same messages.
"""

from __future__ import annotations

import datetime as dt
from typing import Annotated, Any, Literal, get_args

from pydantic import BeforeValidator, ConfigDict, Field, ValidationInfo, field_validator

from app.schemas.base import FrozenModel
from app.schemas.jobs import JobStatus
from app.schemas.keys import TEAM_NAME

UsageDimension = Literal["key", "team", "pattern", "model", "provider", "day", "hour"]
USAGE_DIMENSIONS: tuple[str, ...] = get_args(UsageDimension)
JOB_STATUSES: tuple[str, ...] = get_args(JobStatus)

DEFAULT_WINDOW = dt.timedelta(days=30)
# A window is read by index range; past a year and a month the answer is an export, not a report.
MAX_WINDOW = dt.timedelta(days=400)
# Hourly buckets over a longer window would be a series too long to draw or read.
MAX_HOURLY_WINDOW = dt.timedelta(days=31)

KEY_ID = r"^[0-9a-f]{16}$"
PROVIDER = r"^[a-z0-9][a-z0-9_-]{0,31}$"
PATTERN_NAME = r"^[A-Za-z0-9][A-Za-z0-9_.:/@-]{0,199}$"


# `provider/model`, the slash required (the document says so, not only the validator).
PROVIDER_MODEL = r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,63}/[A-Za-z0-9][A-Za-z0-9._:/-]{0,190}$"


def _dimensions(value: Any) -> Any:
    """`key,model`, repeated values, or both; order kept, repeats dropped."""
    if value is None:
        return []
    items = [value] if isinstance(value, str) else list(value)
    names = [part.strip() for item in items for part in str(item).split(",")]
    return list(dict.fromkeys(name for name in names if name))


def _instant(value: Any) -> Any:
    """An ISO instant, or a date meaning its 00:00 UTC; an instant without offset is UTC."""
    if not isinstance(value, str):
        return value
    text = value.strip()
    try:
        if len(text) == 10:
            day = dt.date.fromisoformat(text)
            return dt.datetime(day.year, day.month, day.day, tzinfo=dt.UTC)
        parsed = dt.datetime.fromisoformat(text)
    except ValueError:
        raise ValueError(
            f"{value!r} is not an ISO date (2026-11-26) or instant (2026-11-26T08:00:00Z)"
        ) from None
    return parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=dt.UTC)


Dimensions = Annotated[list[UsageDimension], BeforeValidator(_dimensions)]
Instant = Annotated[dt.datetime | None, BeforeValidator(_instant)]


class UsageQuery(FrozenModel):
    """Which jobs to sum and how to group them. `from` is inclusive, `to` exclusive; both
    default to the 30 days up to now. The query string's names are the fields' aliases."""

    model_config = ConfigDict(populate_by_name=True)

    group_by: Dimensions = Field(
        default_factory=list,
        max_length=len(USAGE_DIMENSIONS),
        description="Group by one or more of key, team, pattern, model (`provider/model`), "
        "provider, day (UTC date), hour (UTC hour, `2026-11-27T08:00:00Z`; a window of at most "
        "31 days); comma-separated or repeated. None: one group, the totals.",
    )
    # `to` before `from`: the default start is counted back from the end.
    end: Instant = Field(
        default=None,
        alias="to",
        validate_default=True,
        description="End of the window, exclusive: an ISO instant or date (00:00 UTC). "
        "Default: now.",
    )
    start: Instant = Field(
        default=None,
        alias="from",
        validate_default=True,
        description="Start of the window, inclusive: an ISO instant or date (00:00 UTC). "
        "Default: 30 days before `to`; at most 400 days before it.",
    )
    key: str | None = Field(default=None, pattern=KEY_ID, description="Only this key's jobs.")
    team: str | None = Field(default=None, pattern=TEAM_NAME, description="Only this team's.")
    pattern: str | None = Field(
        default=None, pattern=PATTERN_NAME, description="Only this pattern's or template's."
    )
    model: str | None = Field(
        default=None,
        pattern=PROVIDER_MODEL,
        description="Only this model, written `provider/model`.",
    )
    provider: str | None = Field(default=None, pattern=PROVIDER, description="Only this one's.")
    overhead: bool = Field(
        default=False,
        description="Also each group's overhead percentiles (`overhead_p50_ms`, "
        "`overhead_p99_ms`); the database then counts every group into a histogram, which "
        "makes a report over many jobs slower. Without it both are empty.",
    )

    @field_validator("end")
    @classmethod
    def _end(cls, value: dt.datetime | None) -> dt.datetime:
        return value if value is not None else dt.datetime.now(dt.UTC)

    @field_validator("start")
    @classmethod
    def _start(cls, value: dt.datetime | None, info: ValidationInfo) -> dt.datetime | None:
        end = info.data.get("end")
        if end is None:  # `to` itself was refused: that error is the one to read
            return value
        start = value if value is not None else end - DEFAULT_WINDOW
        if start >= end:
            raise ValueError("must be before `to` (`from` is inclusive, `to` exclusive)")
        if end - start > MAX_WINDOW:
            raise ValueError(f"the window may span at most {MAX_WINDOW.days} days")
        if "hour" in info.data.get("group_by", ()) and end - start > MAX_HOURLY_WINDOW:
            raise ValueError(
                f"grouped by hour, the window may span at most {MAX_HOURLY_WINDOW.days} days"
            )
        return start

    @field_validator("model")
    @classmethod
    def _provider_and_model(cls, value: str | None) -> str | None:
        if value is not None and "/" not in value:
            raise ValueError("write the model as provider/model, e.g. openai/gpt-4o")
        return value

    @property
    def since(self) -> dt.datetime:
        assert self.start is not None  # set by its validator whenever validation succeeds
        return self.start

    @property
    def until(self) -> dt.datetime:
        assert self.end is not None
        return self.end


class UsageTotals(FrozenModel):
    """Requests, tokens and dollars of a set of jobs. Tokens and cost are what providers billed:
    a response-cache hit (`cached`) and a job still `pending` count as requests only."""

    requests: int = Field(description="Jobs in the window, whatever their status.")
    statuses: dict[str, int] = Field(
        description="Jobs by status: " + ", ".join(JOB_STATUSES) + " (zeros included)."
    )
    input_tokens: int = Field(
        description="Plain (uncached) prompt tokens: the whole prompt minus cache reads "
        "(`cached_input_tokens`) and cache writes (`cache_write_tokens`)."
    )
    cached_input_tokens: int = Field(description="Prompt tokens read from the provider's cache.")
    cache_write_tokens: int = Field(
        description="Prompt tokens written to the provider's cache (5-minute and 1-hour)."
    )
    output_tokens: int = Field(description="Answer tokens, reasoning included.")
    reasoning_tokens: int = Field(description="Of the output tokens, those spent reasoning.")
    cost_usd: float = Field(description="What the calls cost, in USD, at the configured prices.")
    cache_saved_usd: float = Field(
        description="What the provider's prompt cache saved against the same tokens uncached "
        "(negative when writes cost more than the reads saved)."
    )
    overhead_p50_ms: float | None = Field(
        default=None,
        description="The gateway's own time per job (latency minus upstream time), median, in "
        "ms; estimated from a histogram with buckets 19% wide. Null: no finished jobs, or "
        "`overhead` was not asked for.",
    )
    overhead_p99_ms: float | None = Field(default=None, description="The same, 99th percentile.")


class UsageGroup(UsageTotals):
    """One group's sums; `group` holds its value for each `group_by` dimension (null: jobs made
    with auth disabled have no key or team)."""

    group: dict[str, str | None]
    last_at: dt.datetime = Field(description="When the group's newest job in the window was made.")


class UsageWindow(FrozenModel):
    """The window summed, as `from` (inclusive) and `to` (exclusive)."""

    model_config = ConfigDict(populate_by_name=True, serialize_by_alias=True)

    start: dt.datetime = Field(alias="from", description="Inclusive.")
    end: dt.datetime = Field(alias="to", description="Exclusive.")


class UsageReport(FrozenModel):
    """Usage in a window: one entry per group (ordered by the group's values) and their totals;
    the groups always add up to the totals."""

    window: UsageWindow
    group_by: list[UsageDimension]
    filters: dict[str, str] = Field(description="The filters applied (a complete key: its own).")
    groups: list[UsageGroup]
    totals: UsageTotals
