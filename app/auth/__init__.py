"""API keys and scopes: who may call which route."""

from app.auth.keys import Scope

__all__ = ["Scope"]
