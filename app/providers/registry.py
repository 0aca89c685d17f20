"""Builds one client per configured provider at start-up and closes them at shutdown."""

from __future__ import annotations

import anthropic
import httpx
import ollama
import openai

from app.config import Settings
from app.errors import ProviderUnavailable
from app.providers.anthropic import AnthropicProvider
from app.providers.base import Provider
from app.providers.ollama import OllamaProvider
from app.providers.openai import OpenAIProvider
from app.routing.policy import KNOWN_PROVIDERS

# A compatible server reached through a base URL often needs no key; the SDKs insist on one.
_PLACEHOLDER_KEY = "not-needed"

_SUPPORTED_PARAMS = {
    "openai": OpenAIProvider.supported_params,
    "anthropic": AnthropicProvider.supported_params,
    "ollama": OllamaProvider.supported_params,
}

_HOW_TO_CONFIGURE = {
    "openai": "set OPENAI_API_KEY (or OPENAI_BASE_URL for an OpenAI-compatible server)",
    "anthropic": "set ANTHROPIC_API_KEY (or ANTHROPIC_BASE_URL)",
    "ollama": "set OLLAMA_HOST",
}


class ProviderRegistry:
    def __init__(self, providers: dict[str, Provider]) -> None:
        self._providers = providers

    @classmethod
    def from_settings(cls, settings: Settings) -> ProviderRegistry:
        """SDK retries are off: `app.providers.retry` is the only retry layer."""
        timeout = settings.upstream.timeout_seconds
        providers: dict[str, Provider] = {}
        oa = settings.openai
        if oa.api_key or oa.base_url:
            key = oa.api_key.get_secret_value() if oa.api_key else _PLACEHOLDER_KEY
            providers["openai"] = OpenAIProvider(
                openai.AsyncOpenAI(
                    api_key=key, base_url=oa.base_url, timeout=timeout, max_retries=0
                )
            )
        an = settings.anthropic
        if an.api_key or an.base_url:
            key = an.api_key.get_secret_value() if an.api_key else _PLACEHOLDER_KEY
            providers["anthropic"] = AnthropicProvider(
                anthropic.AsyncAnthropic(
                    api_key=key, base_url=an.base_url, timeout=timeout, max_retries=0
                ),
                default_max_tokens=settings.default_max_tokens,
            )
        # Ollama needs no key; it is always configured (default host: the local daemon).
        providers["ollama"] = OllamaProvider(
            ollama.AsyncClient(host=settings.ollama.host, timeout=httpx.Timeout(timeout))
        )
        return cls(providers)

    def get(self, name: str) -> Provider:
        provider = self._providers.get(name)
        if provider is None:
            raise ProviderUnavailable(
                f"Provider {name!r} is not configured: {_HOW_TO_CONFIGURE[name]}.",
                provider=name,
            )
        return provider

    @staticmethod
    def supported_params(name: str) -> frozenset[str]:
        """What a provider accepts, known even when it is not configured (for dry runs)."""
        return _SUPPORTED_PARAMS[name]

    def status(self) -> dict[str, bool]:
        return {name: name in self._providers for name in KNOWN_PROVIDERS}

    async def aclose(self) -> None:
        for provider in self._providers.values():
            await provider.aclose()
