"""One small async interface to every provider, each on its official SDK."""

from app.providers.base import Provider, ProviderCall, ProviderReply
from app.providers.registry import ProviderRegistry

__all__ = ["Provider", "ProviderCall", "ProviderRegistry", "ProviderReply"]
