"""File-backed prompt patterns: loading, front-matter, sandboxed rendering, content hashes."""

from app.catalog.catalog import PatternCatalog
from app.catalog.library import PatternLibrary
from app.catalog.pattern import Pattern, PatternInfo, PatternMeta, RenderedPattern

__all__ = [
    "Pattern",
    "PatternCatalog",
    "PatternInfo",
    "PatternLibrary",
    "PatternMeta",
    "RenderedPattern",
]
