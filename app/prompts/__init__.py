"""Prompt rendering helpers, including personal-data redaction before persistence."""
