"""The providers the gateway knows (one descriptor each), and the clients built for them.

The built-in three are fixed; each OpenAI-compatible endpoint the settings declare (`endpoints:`
in genai.yaml) is one more, under its own name. `descriptors(settings)` is the one place that
decides which provider names exist: routing, readiness and the registry all ask it.
"""

from __future__ import annotations

from collections.abc import Mapping

from app.config import EndpointSettings, Settings
from app.errors import ProviderUnavailable
from app.providers import anthropic, ollama, openai
from app.providers.base import Provider, ProviderDescriptor

DESCRIPTORS: Mapping[str, ProviderDescriptor] = {
    d.name: d for d in (openai.DESCRIPTOR, anthropic.DESCRIPTOR, ollama.DESCRIPTOR)
}
PROVIDER_NAMES: tuple[str, ...] = tuple(DESCRIPTORS)
"""The built-in providers (config's BUILTIN_PROVIDERS, which endpoints may not be named);
`provider_names(settings)` adds the configured endpoints."""


def _endpoint(name: str, endpoint: EndpointSettings) -> ProviderDescriptor:
    return ProviderDescriptor(
        name=name,
        supported_params=openai.DESCRIPTOR.supported_params,  # it speaks the OpenAI API
        how_to_configure=f"it is declared under endpoints.{name} in the config file",
        build=lambda settings: openai.compatible_provider(
            name, endpoint.api_key, endpoint.base_url, settings
        ),
    )


def descriptors(settings: Settings) -> dict[str, ProviderDescriptor]:
    """Every provider these settings know: the built-ins, then the configured endpoints."""
    return {
        **DESCRIPTORS,
        **{name: _endpoint(name, endpoint) for name, endpoint in settings.endpoints.items()},
    }


def provider_names(settings: Settings) -> tuple[str, ...]:
    """What `provider/model` may start with under these settings."""
    return (*PROVIDER_NAMES, *settings.endpoints)


class ProviderRegistry:
    """One adapter (and one long-lived SDK client) per configured provider, closed together."""

    def __init__(
        self,
        providers: Mapping[str, Provider],
        known: Mapping[str, ProviderDescriptor] = DESCRIPTORS,
    ) -> None:
        self._providers = dict(providers)
        self._known = dict(known)

    @classmethod
    def from_settings(cls, settings: Settings) -> ProviderRegistry:
        known = descriptors(settings)
        built = {name: d.build(settings) for name, d in known.items()}
        return cls({name: p for name, p in built.items() if p is not None}, known)

    def get(self, name: str) -> Provider:
        provider = self._providers.get(name)
        if provider is None:
            descriptor = self._known.get(name)
            how = descriptor.how_to_configure if descriptor else "it is not a known provider"
            raise ProviderUnavailable(f"Provider {name!r} is not configured: {how}.", provider=name)
        return provider

    @staticmethod
    def descriptor(name: str) -> ProviderDescriptor:
        """What is known of a provider even when it is not configured (for dry runs).

        A name that is not built in is a configured endpoint (model names are checked against
        `provider_names` before they get here), and endpoints speak the OpenAI API.
        """
        return DESCRIPTORS.get(name, openai.DESCRIPTOR)

    @staticmethod
    def supported_params(name: str) -> frozenset[str]:
        return ProviderRegistry.descriptor(name).supported_params

    def status(self) -> dict[str, bool]:
        return {name: name in self._providers for name in self._known}

    async def aclose(self) -> None:
        for provider in self._providers.values():
            await provider.aclose()
