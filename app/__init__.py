"""GenAI Service: a completion gateway with managed prompt patterns and provable provenance."""

__version__ = "0.1.0"
