"""The service's view of the pattern catalog: one or more roots searched in order."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import structlog

from app.catalog.library import PatternLibrary
from app.catalog.pattern import Pattern, RenderedPattern
from app.errors import InvalidPattern, PatternNotFound

log = structlog.get_logger(__name__)


class PatternCatalog:
    """Resolves names across roots; like PATH, the first root holding a name owns it.

    Within a root a name is unique by construction (one file per path); a name found in an
    earlier root shadows the same name in a later one, and `shadowed()` reports that.
    """

    def __init__(
        self,
        base_path: str | Path | None = None,
        *,
        roots: Sequence[str | Path] = (),
        defaults: Mapping[str, Any] | None = None,
    ) -> None:
        paths = [*([base_path] if base_path is not None else []), *roots]
        if not paths:
            raise ValueError("PatternCatalog needs a base_path or at least one root")
        unique = list(dict.fromkeys(str(p) for p in paths))
        self.libraries = [PatternLibrary(p, defaults=defaults) for p in unique]

    def refresh(self) -> bool:
        """Blocking: re-scan every root (run it in a worker thread)."""
        return any([library.refresh() for library in self.libraries])

    def _owner(self, name: str) -> PatternLibrary:
        for library in self.libraries:
            if library.has(name):
                return library
        raise PatternNotFound(name)

    def get(self, name: str) -> Pattern:
        return self._owner(name).get(name)

    def apply_template(
        self, name: str, variables: Mapping[str, Any], *, user_prompt: str = ""
    ) -> RenderedPattern:
        return self._owner(name).apply_template(name, variables, user_prompt=user_prompt)

    def names(self) -> list[str]:
        return sorted({name for library in self.libraries for name in library.names()})

    def loadable(self) -> list[Pattern]:
        """Every loadable pattern, each name once; broken ones are left to `problems()`."""
        found = []
        for name in self.names():
            try:
                found.append(self.get(name))
            except InvalidPattern:
                continue
        return found

    def problems(self) -> dict[str, InvalidPattern]:
        """Broken patterns, reported for the root that owns each name."""
        found: dict[str, InvalidPattern] = {}
        for library in reversed(self.libraries):
            found.update(library.problems())
            for name in library.names():
                if name not in library.problems():
                    found.pop(name, None)
        return found

    def shadowed(self) -> dict[str, list[str]]:
        """Names present in more than one root, with the roots in search order."""
        owners: dict[str, list[str]] = {}
        for library in self.libraries:
            for name in library.names():
                owners.setdefault(name, []).append(library.base_path)
        return {name: roots for name, roots in owners.items() if len(roots) > 1}

    def missing_roots(self) -> list[str]:
        return [library.base_path for library in self.libraries if not library.exists]
