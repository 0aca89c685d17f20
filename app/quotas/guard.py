"""QuotaGuard: a key's allowlists, budgets and rate limits, checked before anything is called.

A request of a limited key (or of a key in a limited team) first reserves its worst case: one
request against `rpm`, its estimated input plus its max output tokens against `tpm`, and what
those tokens cost at the model's price against every budget window. The reservation is atomic
across all those counters (`app.quotas.counters`), so concurrent requests cannot all pass one
check; once the answer is in, the reservation is settled to what the call really used, so a
budget overshoots by at most the last admitted call's difference. A key without limits costs
nothing here: no counter is read or written.

What is settled to what:
- completed: the recorded cost and tokens (what `/v1/usage` sums, so the two agree);
- failed before an answer, or answered from the response cache: nothing (the reservation is
  given back; the request still counts against `rpm`);
- cancelled (the client left, perhaps mid-stream, after the provider began billing): the
  reservation stands, since what the provider charged is unknown. Leaving early never spends
  less than finishing would.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import structlog

from app.audit.records import prompt_size
from app.auth.principal import Principal
from app.errors import (
    BudgetExceeded,
    KeyRateLimited,
    ModelNotAllowed,
    PatternNotAllowed,
    QuotaStoreUnavailable,
    StoreUnavailable,
)
from app.pipeline.prepare import Prepared
from app.quotas.counters import CounterStore
from app.quotas.windows import Period, Window, period
from app.routing.prices import TOKENS_PER_PRICE_UNIT, PriceTable
from app.schemas import Limits, LimitStatus, ModelParams, RateUse, RenderRequest, Usage, WindowSpend
from app.store.counters import Charge

log = structlog.get_logger(__name__)

Clock = Callable[[], dt.datetime]
CHARS_PER_TOKEN_ESTIMATE = 3  # conservative for English (~4) and still bounded for other scripts


def _utc_now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def pattern_name(request: RenderRequest) -> str:
    """The name a pattern allowlist is matched against: the pattern's, or `template:NAME:ROLE`."""
    if request.pattern_key is not None:
        return request.pattern_key
    assert request.template is not None  # RenderRequest guarantees exactly one source
    return f"template:{request.template.name}:{request.template.role}"


def check_pattern(caller: Principal | None, request: RenderRequest) -> None:
    """403 pattern_not_allowed before anything is rendered."""
    if caller is not None and caller.allowed_patterns is not None:
        name = pattern_name(request)
        if not caller.may_use_pattern(name):
            raise PatternNotAllowed(name)


def check_model(caller: Principal | None, model: str) -> None:
    """403 model_not_allowed for the model the policy chose (`provider/name`)."""
    if caller is not None and not caller.may_use_model(model):
        raise ModelNotAllowed(model)


@dataclass(frozen=True, slots=True)
class Estimate:
    """A call's worst case: its tokens and their cost (None: the model has no price)."""

    tokens: int
    usd: float | None


@dataclass(frozen=True, slots=True)
class _Counter:
    """One limit of one owner in its current period, with how much a request charges it."""

    owner: str  # "key" or "team"
    limit_name: str  # "rpm", "tpm" or a budget window
    charge: Charge
    period: Period
    kind: str  # "req", "tok" or "usd"


@dataclass(slots=True)
class Reservation:
    """What a request holds against its counters until it is settled."""

    guard: QuotaGuard | None
    counters: Sequence[_Counter] = ()
    settled: bool = field(default=False)

    def settle(self, usage: Usage | None, cost_usd: float | None) -> None:
        """Replace the reservation by what the call used (in the background: the answer does
        not wait for the counters). `usage` None: nothing was used."""
        if self.settled or self.guard is None or not self.counters:
            return
        self.settled = True
        changes = []
        for counter in self.counters:
            if counter.kind == "tok":
                used = float(_tokens(usage))
            elif counter.kind == "usd":
                used = cost_usd or 0.0
            else:
                continue  # a request counts whatever happened to it
            if used != counter.charge.amount:
                changes.append(
                    Charge(
                        counter.charge.name, used - counter.charge.amount, 0, counter.period.ends_at
                    )
                )
        self.guard.adjust_later(changes)

    def release(self) -> None:
        """Give the reservation back: nothing was used (a failure, a cache hit)."""
        self.settle(None, None)


NOTHING_RESERVED = Reservation(guard=None)


def _tokens(usage: Usage | None) -> int:
    if usage is None:
        return 0
    return (usage.input_tokens or 0) + (usage.output_tokens or 0)


class QuotaGuard:
    def __init__(
        self,
        counters: CounterStore,
        prices: PriceTable,
        *,
        reserve_output_tokens: int,
        fail_open: bool,
        clock: Clock = _utc_now,
    ) -> None:
        self.counters = counters
        self.prices = prices
        self.clock = clock  # windows are judged by it (tests move time without sleeping)
        self._reserve_output = reserve_output_tokens
        self._fail_open = fail_open
        self._queued: dict[str, Charge] = {}  # settlements not yet written, summed by counter
        self._settling: asyncio.Task[None] | None = None

    def estimate(
        self, provider: str, model: str, prompt_chars: int, params: ModelParams
    ) -> Estimate:
        """The worst case of one call: the prompt at a conservative chars-per-token rate, plus
        every output token it may produce, at the dearest rate a prompt token may be billed at
        (a cache write costs more than plain input) and the output rate, in the price tier the
        prompt's size falls in."""
        input_tokens = math.ceil(prompt_chars / CHARS_PER_TOKEN_ESTIMATE)
        output_tokens = params.max_tokens or self._reserve_output
        price = self.prices.price(provider, model)
        usd = None
        if price is not None:
            rates = price.rates(input_tokens)
            prompt_rate = max(rates.input, rates.write_rate, rates.write_1h_rate)
            micro = input_tokens * prompt_rate + output_tokens * rates.output
            usd = micro / TOKENS_PER_PRICE_UNIT
        return Estimate(tokens=input_tokens + output_tokens, usd=usd)

    async def admit(self, caller: Principal | None, prepared: Prepared) -> Reservation:
        """Reserve a prepared request's worst case against the caller's limits (429 if over)."""
        if caller is None or not caller.limited:
            return NOTHING_RESERVED
        choice = prepared.choice
        size = prompt_size(prepared.prompt)
        return await self.reserve(
            caller, self.estimate(choice.provider, choice.name, size, prepared.params)
        )

    async def reserve(self, caller: Principal | None, estimate: Estimate) -> Reservation:
        """Charge the caller's counters with `estimate`, or refuse with 429 (nothing charged)."""
        if caller is None or not caller.limited:
            return NOTHING_RESERVED
        counters = self._counters(caller, estimate, self.clock())
        try:
            refused = await self.counters.reserve([counter.charge for counter in counters])
        except StoreUnavailable as exc:
            if self._fail_open:
                log.warning("quota_store_unavailable_served_unchecked", key_id=caller.key_id)
                return NOTHING_RESERVED
            raise QuotaStoreUnavailable(
                "The budget and rate counters cannot be reached, and this key has limits; "
                "try again shortly (GENAI_QUOTAS__ON_STORE_ERROR=open serves such keys unchecked)."
            ) from exc
        if refused is not None:
            raise self._refusal(counters[refused])
        return Reservation(guard=self, counters=counters)

    def _counters(self, caller: Principal, estimate: Estimate, now: dt.datetime) -> list[_Counter]:
        found: list[_Counter] = []
        owners = [("key", caller.key_id, caller.limits), ("team", caller.team, caller.team_limits)]
        for owner, ident, limits in owners:
            if ident is None or limits.empty:
                continue
            found += _owner_counters(owner, ident, limits, estimate, now)
        return found

    def _refusal(self, counter: _Counter) -> BudgetExceeded | KeyRateLimited:
        retry_after = None
        if counter.period.ends_at is not None:
            retry_after = max(1.0, (counter.period.ends_at - self.clock()).total_seconds())
        whose = "this key's" if counter.owner == "key" else "its team's"
        if counter.kind == "usd":
            window = counter.limit_name
            when = (
                "never starts over"
                if retry_after is None
                else f"starts over at {counter.period.ends_at:%Y-%m-%d %H:%M} UTC"
            )
            return BudgetExceeded(
                f"The {window} budget of {whose} (${counter.charge.limit:g}) is spent; it {when}. "
                "Ask an admin to raise it (PATCH /v1/keys/{id} or /v1/teams/{name}).",
                owner=counter.owner,
                limit=window,
                retry_after=retry_after,
            )
        unit = "requests" if counter.kind == "req" else "tokens"
        return KeyRateLimited(
            f"Over {whose} {counter.limit_name} limit ({counter.charge.limit:g} {unit} per "
            f"minute); retry after {math.ceil(retry_after or 1)} s.",
            owner=counter.owner,
            limit=counter.limit_name,
            retry_after=retry_after,
        )

    def adjust_later(self, changes: list[Charge]) -> None:
        """Queue settlements; one writer sends everything queued in one call, so under load
        many requests' settlements share a transaction instead of each paying for one."""
        for change in changes:
            queued = self._queued.get(change.name)
            amount = change.amount + (queued.amount if queued else 0.0)
            self._queued[change.name] = Charge(change.name, amount, 0, change.ends_at)
        if self._queued and (self._settling is None or self._settling.done()):
            self._settling = asyncio.ensure_future(self._settle_queued())

    async def _settle_queued(self) -> None:
        while self._queued:
            changes, self._queued = list(self._queued.values()), {}
            try:
                await self.counters.adjust(changes)
            except StoreUnavailable:
                # The reservations stay charged: a budget errs towards refusing, never spending.
                log.warning("quota_settle_failed", counters=len(changes))

    async def tidy(self) -> None:
        """Delete counters whose period is long over (Redis expires its own)."""
        try:
            await self.counters.forget_expired(self.clock())
        except StoreUnavailable:
            log.warning("quota_counters_not_tidied")

    async def aclose(self) -> None:
        await self.counters.aclose()

    async def drain(self) -> None:
        """Wait for settlements in flight (at shutdown, and in tests)."""
        while self._settling is not None and not self._settling.done():
            await asyncio.shield(self._settling)

    async def status(self, owner: str, ident: str, limits: Limits) -> LimitStatus:
        """Where an owner stands against its limits in the current periods."""
        now = self.clock()
        counters = _owner_counters(owner, ident, limits, Estimate(tokens=0, usd=0.0), now)
        amounts = await self.counters.read([counter.charge.name for counter in counters])
        budgets, rates = [], {}
        for counter in counters:
            used = amounts[counter.charge.name]
            if counter.kind == "usd":
                budget = counter.charge.limit
                budgets.append(
                    WindowSpend(
                        window=counter.limit_name,
                        budget_usd=budget,
                        spent_usd=round(used, 8),
                        remaining_usd=round(max(0.0, budget - used), 8),
                        resets_at=counter.period.ends_at,
                    )
                )
            else:
                assert counter.period.ends_at is not None
                rates[counter.limit_name] = RateUse(
                    limit=int(counter.charge.limit),
                    used=math.ceil(used),
                    resets_at=counter.period.ends_at,
                )
        return LimitStatus(budgets=budgets, rpm=rates.get("rpm"), tpm=rates.get("tpm"))


def _owner_counters(
    owner: str, ident: str, limits: Limits, estimate: Estimate, now: dt.datetime
) -> list[_Counter]:
    """The counters one owner's limits name in the current periods, charged with `estimate`."""

    def counter(
        kind: str, limit_name: str, window: Window, amount: float, limit: float
    ) -> _Counter:
        current = period(window, now)
        name = f"{owner}:{ident}:{kind}:{limit_name}:{current.label}"
        return _Counter(
            owner, limit_name, Charge(name, amount, limit, current.ends_at), current, kind
        )

    found = []
    if limits.rpm is not None:
        found.append(counter("req", "rpm", "minute", 1.0, limits.rpm))
    if limits.tpm is not None:
        found.append(counter("tok", "tpm", "minute", float(estimate.tokens), limits.tpm))
    for budget in limits.budgets:
        found.append(counter("usd", budget.window, budget.window, estimate.usd or 0.0, budget.usd))
    return found
