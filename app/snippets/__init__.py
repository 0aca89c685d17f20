"""The snippet library: reusable prompt fragments from the database and from files."""

from app.snippets.library import ComposedSnippets, SnippetLibrary

__all__ = ["ComposedSnippets", "SnippetLibrary"]
