"""File-backed prompt patterns: loading, front-matter, sandboxed rendering, content hashes."""

from app.catalog.adapter import PatternsAdapter
from app.catalog.library import PatternLibrary
from app.catalog.pattern import Pattern, PatternMeta, RenderedPattern

__all__ = ["Pattern", "PatternLibrary", "PatternMeta", "PatternsAdapter", "RenderedPattern"]
