"""Cost from the shipped price table: lookup rules, overrides, no double counting, metrics."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st
from prometheus_client.parser import text_string_to_metric_families

from app.config import ModelPrice, Settings, get_settings
from app.errors import ConfigurationError
from app.observability.metric_labels import LabelVocabulary
from app.observability.metrics import Metrics
from app.routing.prices import PriceTable
from app.schemas import Usage
from tests.fakes.provider_server import FakeProviderServer, Reply
from tests.support import serve_app, settings_for

SHIPPED = PriceTable.load()
REQUEST = {
    "pattern_key": "summarize",
    "variables": {"max_words": 40},
    "user_prompt": "Long text.",
    "model": "openai/gpt-4o-mini",
}


def per_million(tokens: int, usd: float) -> float:
    return tokens * usd / 1_000_000


def cost_usd(table: PriceTable, provider: str, model: str, usage: Usage) -> float | None:
    priced = table.cost(provider, model, usage)
    return None if priced is None else priced.usd


def test_the_shipped_table_prices_the_common_models() -> None:
    for provider, model in [
        ("openai", "gpt-4o"),
        ("openai", "gpt-4o-mini"),
        ("openai", "gpt-4.1"),
        ("openai", "gpt-4.1-mini"),
        ("openai", "gpt-4.1-nano"),
        ("openai", "o3"),
        ("openai", "o4-mini"),
        ("anthropic", "claude-sonnet-4-5"),
        ("anthropic", "claude-haiku-4-5"),
        ("anthropic", "claude-opus-4-1"),
    ]:
        price = SHIPPED.price(provider, model)
        assert price is not None, f"{provider}/{model} has no price"
        assert price.output > price.input > 0
        assert price.cached_input is not None and price.cached_input < price.input


def test_cached_input_is_charged_at_its_own_rate_and_only_once() -> None:
    usage = Usage(input_tokens=10_000, cached_input_tokens=4_000, output_tokens=2_000)
    # gpt-4o-mini: 0.15 input, 0.075 cached input, 0.60 output per million.
    expected = per_million(6_000, 0.15) + per_million(4_000, 0.075) + per_million(2_000, 0.60)
    assert cost_usd(SHIPPED, "openai", "gpt-4o-mini", usage) == pytest.approx(expected)


def test_reasoning_tokens_are_output_tokens_and_not_charged_again() -> None:
    plain = Usage(input_tokens=1_000, output_tokens=5_000)
    thinking = Usage(input_tokens=1_000, output_tokens=5_000, reasoning_tokens=4_000)
    cost = cost_usd(SHIPPED, "openai", "o4-mini", thinking)
    assert cost == cost_usd(SHIPPED, "openai", "o4-mini", plain)
    assert cost == pytest.approx(per_million(1_000, 1.10) + per_million(5_000, 4.40))


def test_without_a_cached_rate_cached_input_costs_as_much_as_input() -> None:
    table = PriceTable.load({"vllm/*": ModelPrice(input=1.0, output=2.0)})
    cached = Usage(input_tokens=1_000, cached_input_tokens=1_000, output_tokens=0)
    uncached = Usage(input_tokens=1_000, output_tokens=0)
    assert cost_usd(table, "vllm", "qwen", cached) == cost_usd(table, "vllm", "qwen", uncached)
    assert cost_usd(table, "vllm", "qwen", cached) == pytest.approx(0.001)


def test_an_unpriced_model_or_unreported_usage_has_no_cost() -> None:
    usage = Usage(input_tokens=10, output_tokens=10)
    assert cost_usd(SHIPPED, "groq", "llama-3.1-8b-instant", usage) is None
    assert cost_usd(SHIPPED, "openai", "gpt-unknown", usage) is None
    assert cost_usd(SHIPPED, "openai", "gpt-4o", Usage()) is None
    assert cost_usd(SHIPPED, "openai", "gpt-4o", Usage(input_tokens=10)) is None


def test_local_ollama_models_cost_nothing() -> None:
    usage = Usage(input_tokens=5_000, output_tokens=5_000)
    assert cost_usd(SHIPPED, "ollama", "llama3.2", usage) == 0.0
    assert cost_usd(SHIPPED, "ollama", "qwen2.5:14b-instruct", usage) == 0.0


@pytest.mark.parametrize(
    ("model", "priced_as"),
    [
        ("gpt-4o-2024-08-06", "gpt-4o"),
        ("gpt-4o-mini-2024-07-18", "gpt-4o-mini"),
        ("gpt-4.1-2025-04-14", "gpt-4.1"),
        ("claude-sonnet-4-5-20250929", "claude-sonnet-4-5"),
        ("claude-haiku-4-5-20251001", "claude-haiku-4-5"),
        ("claude-sonnet-4-20250514", "claude-sonnet-4"),
    ],
)
def test_a_dated_snapshot_is_priced_under_its_undated_name(model: str, priced_as: str) -> None:
    provider = "anthropic" if model.startswith("claude") else "openai"
    assert SHIPPED.price(provider, model) == SHIPPED.price(provider, priced_as)


def test_a_snapshot_with_its_own_entry_keeps_its_own_price() -> None:
    snapshot = SHIPPED.price("openai", "gpt-4o-2024-05-13")
    assert snapshot is not None
    assert snapshot != SHIPPED.price("openai", "gpt-4o")


def test_only_a_date_is_dropped_never_another_suffix() -> None:
    # A different model that merely starts like a priced one must not inherit its price.
    assert SHIPPED.price("openai", "gpt-4o-mini-tts") is None
    assert SHIPPED.price("openai", "gpt-4o-realtime-preview") is None
    assert SHIPPED.price("openai", "gpt-4o-2024") is None


def test_overrides_replace_entries_and_a_wildcard_covers_only_the_unlisted() -> None:
    table = PriceTable.load(
        {
            "openai/gpt-4o": ModelPrice(input=1.0, cached_input=0.5, output=2.0),
            "openai/*": ModelPrice(input=9.0, output=9.0),
        }
    )
    assert table.price("openai", "gpt-4o") == ModelPrice(input=1.0, cached_input=0.5, output=2.0)
    assert table.price("openai", "gpt-4o-2024-11-20") == table.price("openai", "gpt-4o")
    assert table.price("openai", "gpt-4o-mini") == SHIPPED.price("openai", "gpt-4o-mini")
    assert table.price("openai", "ft:gpt-4o-mini:acme") == ModelPrice(input=9.0, output=9.0)
    assert table.price("anthropic", "claude-haiku-4-5") == SHIPPED.price(
        "anthropic", "claude-haiku-4-5"
    )


@pytest.mark.parametrize("key", ["gpt-4o", "openai/", "/gpt-4o", "openai/gpt-4*", "*/gpt-4o"])
def test_a_malformed_override_key_is_refused_at_start(key: str) -> None:
    with pytest.raises(ConfigurationError) as caught:
        PriceTable.load({key: ModelPrice(input=1.0, output=1.0)})
    assert caught.value.setting == "prices"
    assert repr(key) in caught.value.problem


def test_settings_take_prices_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(
        "GENAI_PRICES",
        '{"groq/*": {"input": 0.05, "output": 0.08}, "openai/o3": {"input": 1, '
        '"cached_input": 0.25, "output": 4}}',
    )
    settings = Settings(_env_file=None)
    table = PriceTable.load(settings.prices)
    assert table.price("groq", "llama-3.1-8b-instant") == ModelPrice(input=0.05, output=0.08)
    assert table.price("openai", "o3") == ModelPrice(input=1, cached_input=0.25, output=4)


def test_a_negative_price_is_invalid() -> None:
    with pytest.raises(ValueError, match="greater than or equal to 0"):
        ModelPrice(input=-1.0, output=1.0)


@given(
    input_tokens=st.integers(0, 10**7),
    cached_share=st.floats(0, 1),
    output_tokens=st.integers(0, 10**7),
    reasoning_share=st.floats(0, 1),
)
def test_cost_is_never_negative_and_caching_never_costs_more(
    input_tokens: int, cached_share: float, output_tokens: int, reasoning_share: float
) -> None:
    cached = int(input_tokens * cached_share)
    usage = Usage(
        input_tokens=input_tokens,
        cached_input_tokens=cached,
        output_tokens=output_tokens,
        reasoning_tokens=int(output_tokens * reasoning_share),
    )
    uncached = Usage(input_tokens=input_tokens, output_tokens=output_tokens)
    for provider, model in [("openai", "gpt-4.1"), ("anthropic", "claude-sonnet-4-5")]:
        with_cache = cost_usd(SHIPPED, provider, model, usage)
        without = cost_usd(SHIPPED, provider, model, uncached)
        assert with_cache is not None and without is not None
        assert 0 <= with_cache <= without


def test_metrics_count_tokens_by_kind_and_the_cost() -> None:
    configured = LabelVocabulary(
        models=frozenset({"openai/o4-mini", "vllm/qwen"}), providers=frozenset({"openai", "vllm"})
    )
    metrics = Metrics(labels=configured)
    usage = Usage(input_tokens=100, cached_input_tokens=40, output_tokens=30, reasoning_tokens=10)
    metrics.record_usage("openai", "o4-mini", usage, 0.0012, saved_usd=0.0003)
    metrics.record_usage("openai", "o4-mini", usage, 0.0012, saved_usd=-0.0001)
    metrics.record_usage("vllm", "qwen", Usage(input_tokens=5, output_tokens=5), None)

    def tokens(kind: str, model: str = "o4-mini") -> float | None:
        provider = "openai" if model == "o4-mini" else "vllm"
        labels = {"provider": provider, "model": model, "kind": kind}
        return metrics.registry.get_sample_value("genai_tokens_total", labels)

    assert [tokens(kind) for kind in ("input", "cached_input", "output", "reasoning")] == [
        200,
        80,
        60,
        20,
    ]
    assert tokens("input", "qwen") == 5
    assert tokens("reasoning", "qwen") is None  # not reported, not counted as zero
    cost = metrics.registry.get_sample_value(
        "genai_cost_usd_total", {"provider": "openai", "model": "o4-mini"}
    )
    assert cost == pytest.approx(0.0024)
    # A negative saving (cache writes) lowers the without-cache total, the counter still rises.
    without_cache = metrics.registry.get_sample_value(
        "genai_cost_without_cache_usd_total", {"provider": "openai", "model": "o4-mini"}
    )
    assert without_cache == pytest.approx(0.0015 + 0.0011)
    unpriced = {"provider": "vllm", "model": "qwen"}
    assert metrics.registry.get_sample_value("genai_cost_usd_total", unpriced) is None


async def test_the_cost_reaches_the_envelope_the_record_and_the_metrics(
    fake: FakeProviderServer,
) -> None:
    fake.script("openai", Reply.ok(input_tokens=1_000, cached_input_tokens=200, output_tokens=500))
    fake.script("anthropic", Reply.ok(input_tokens=1_000, output_tokens=500))
    overrides = {"anthropic/claude-haiku-4-5": ModelPrice(input=2.0, output=4.0)}
    async with serve_app(settings_for(fake, prices=overrides)) as http:
        priced = (await http.post("/v1/completions", json=REQUEST)).json()
        overridden = (
            await http.post(
                "/v1/completions", json={**REQUEST, "model": "anthropic/claude-haiku-4-5"}
            )
        ).json()
        record = (await http.get(f"/v1/jobs/{priced['job_id']}")).json()
        exposition = (await http.get("/metrics")).text

    # gpt-4o-mini: 800 input at 0.15, 200 cached at 0.075, 500 output at 0.60 per million.
    expected = per_million(800, 0.15) + per_million(200, 0.075) + per_million(500, 0.60)
    assert priced["response"]["cost_usd"] == pytest.approx(expected)
    assert priced["response"]["usage"]["cached_input_tokens"] == 200
    assert record["cost_usd"] == pytest.approx(expected)
    assert record["cached_input_tokens"] == 200
    assert overridden["response"]["cost_usd"] == pytest.approx(
        per_million(1_000, 2.0) + per_million(500, 4.0)
    )
    samples = {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(exposition)
        for sample in family.samples
    }
    openai = (("model", "gpt-4o-mini"), ("provider", "openai"))
    assert samples[("genai_cost_usd_total", openai)] == pytest.approx(expected)
    assert samples[("genai_tokens_total", (("kind", "cached_input"), *openai))] == 200
    assert samples[("genai_tokens_total", (("kind", "input"), *openai))] == 1_000


def test_every_shipped_entry_says_where_and_when_its_price_was_read() -> None:
    for key in ("openai/gpt-4o", "anthropic/claude-sonnet-4-5", "ollama/llama3.2"):
        provider, model = key.split("/")
        price = SHIPPED.price(provider, model)
        assert price is not None and price.source and price.as_of is not None, key
    own = SHIPPED.price("anthropic", "claude-sonnet-4-6")
    default = SHIPPED.price("anthropic", "claude-sonnet-4-5")
    assert own is not None and default is not None
    assert own.as_of != default.as_of  # an entry's own date overrides its provider's


def test_anthropic_cache_writes_are_priced_at_their_published_multiples() -> None:
    for model in ("claude-opus-4-5", "claude-sonnet-4-5", "claude-haiku-4-5", "claude-3-5-haiku"):
        price = SHIPPED.price("anthropic", model)
        assert price is not None and price.cache_write is not None
        assert price.cache_write == pytest.approx(1.25 * price.input), model
        assert price.cache_write_1h == pytest.approx(2 * price.input), model
        assert price.cached_input == pytest.approx(0.1 * price.input), model


def test_each_kind_of_prompt_token_is_charged_once_at_its_rate() -> None:
    usage = Usage(
        input_tokens=10_000,
        cached_input_tokens=5_000,
        cache_write_tokens=3_000,
        cache_write_1h_tokens=1_000,
        output_tokens=500,
    )
    cost = SHIPPED.cost("anthropic", "claude-sonnet-4-5", usage)
    # 2000 x 3 + 5000 x 0.30 + 2000 x 3.75 + 1000 x 6 + 500 x 15 = 28500 µ$
    # without the cache: 10000 x 3 + 7500 = 37500 µ$
    assert cost is not None and (cost.usd, cost.saved_usd) == (0.0285, 0.009)


def test_openai_cache_writes_cost_as_much_as_input() -> None:
    written = Usage(input_tokens=10_000, cache_write_tokens=8_000, output_tokens=0)
    plain = Usage(input_tokens=10_000, output_tokens=0)
    assert cost_usd(SHIPPED, "openai", "gpt-5", written) == cost_usd(
        SHIPPED, "openai", "gpt-5", plain
    )


def test_an_override_sets_every_new_field_and_a_tier() -> None:
    table = PriceTable.load(
        {
            "vllm/*": ModelPrice.model_validate(
                {
                    "input": 1.0,
                    "cached_input": 0.1,
                    "cache_write": 2.0,
                    "output": 4.0,
                    "long_context": {
                        "threshold": 100,
                        "input": 10.0,
                        "cached_input": 1.0,
                        "cache_write": 20.0,
                        "output": 40.0,
                    },
                }
            )
        }
    )
    short = Usage(
        input_tokens=100, cache_write_tokens=50, cache_write_1h_tokens=50, output_tokens=1
    )
    long = short.model_copy(update={"input_tokens": 101})
    # 50 plain x 1 + 50 one-hour writes at the 5-minute rate (no 1h rate) x 2 + 1 x 4 = 154 µ$
    assert cost_usd(table, "vllm", "qwen", short) == 0.000154
    # 51 x 10 + 50 x 20 + 1 x 40 = 1550 µ$
    assert cost_usd(table, "vllm", "qwen", long) == 0.00155


@pytest.mark.parametrize(
    "entry",
    [
        {"input": 1, "output": 1, "cache_write_1h": -1},
        {"input": 1, "output": 1, "long_context": {"input": 2, "output": 2}},
        {
            "input": 1,
            "cached_input": 0.1,
            "output": 1,
            "long_context": {"threshold": 9, "input": 2, "output": 2},
        },
        {"input": 1, "output": 1, "as_of": "late 2025"},
        {"input": 1, "output": 1, "cache_read": 0.1},
    ],
)
def test_a_malformed_price_entry_fails_at_start(
    monkeypatch: pytest.MonkeyPatch, entry: dict[str, object]
) -> None:
    monkeypatch.setenv("GENAI_PRICES", json.dumps({"vllm/*": entry}))
    get_settings.cache_clear()
    with pytest.raises(ConfigurationError) as caught:
        get_settings()
    get_settings.cache_clear()
    assert caught.value.setting.startswith("GENAI_PRICES")
