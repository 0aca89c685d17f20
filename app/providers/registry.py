"""The providers the gateway knows (one descriptor each), and the clients built for them."""

from __future__ import annotations

from collections.abc import Mapping

from app.config import Settings
from app.errors import ProviderUnavailable
from app.providers import anthropic, ollama, openai
from app.providers.base import Provider, ProviderDescriptor

DESCRIPTORS: Mapping[str, ProviderDescriptor] = {
    d.name: d for d in (openai.DESCRIPTOR, anthropic.DESCRIPTOR, ollama.DESCRIPTOR)
}
PROVIDER_NAMES: tuple[str, ...] = tuple(DESCRIPTORS)


class ProviderRegistry:
    """One adapter (and one long-lived SDK client) per configured provider, closed together."""

    def __init__(self, providers: Mapping[str, Provider]) -> None:
        self._providers = dict(providers)

    @classmethod
    def from_settings(cls, settings: Settings) -> ProviderRegistry:
        built = {name: d.build(settings) for name, d in DESCRIPTORS.items()}
        return cls({name: p for name, p in built.items() if p is not None})

    def get(self, name: str) -> Provider:
        provider = self._providers.get(name)
        if provider is None:
            raise ProviderUnavailable(
                f"Provider {name!r} is not configured: {DESCRIPTORS[name].how_to_configure}.",
                provider=name,
            )
        return provider

    @staticmethod
    def supported_params(name: str) -> frozenset[str]:
        """What a provider accepts, known even when it is not configured (for dry runs)."""
        return DESCRIPTORS[name].supported_params

    def status(self) -> dict[str, bool]:
        return {name: name in self._providers for name in DESCRIPTORS}

    async def aclose(self) -> None:
        for provider in self._providers.values():
            await provider.aclose()
