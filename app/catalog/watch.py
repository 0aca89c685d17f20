"""One file watcher for every pattern root, so edits apply without a restart and without polling.

Pattern files and snippet files (`<root>/snippets/`) live under the same roots, so one
`watchfiles` watcher (inotify and friends) covers both; each batch of changes refreshes only
the owner it touches, in a worker thread, never on the event loop. A root that does not exist
yet (or is removed) is looked for again every `recheck_seconds`, and the watch restarts when
the set of existing roots changes.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import structlog
from watchfiles import awatch

from app.catalog.library import SNIPPETS_DIR

log = structlog.get_logger(__name__)

_MAX_BATCH_MS = 1_600  # watchfiles' default: a long burst of edits is still applied in chunks

Refresh = Callable[[], bool]


@dataclass(frozen=True, slots=True)
class Owners:
    """Who re-reads what: the pattern catalog, and the snippet files under the same roots."""

    patterns: Refresh
    snippets: Refresh


def owners_of(changed: Iterable[str], roots: Sequence[Path]) -> tuple[bool, bool]:
    """Whether the changed paths touch (patterns, snippets): `<root>/snippets/…` is snippets."""
    patterns = snippets = False
    for raw in changed:
        path = Path(raw)
        root = next((r for r in roots if path.is_relative_to(r)), None)
        if root is None:
            continue
        relative = path.relative_to(root).parts
        if relative and relative[0] == SNIPPETS_DIR:
            snippets = True
        else:
            patterns = True  # includes a root itself appearing or vanishing
            if not relative:
                snippets = True
    return patterns, snippets


class FileWatcher:
    """Watches the roots until `aclose()`; `quiet_seconds` is how long edits must settle."""

    def __init__(
        self,
        roots: Sequence[Path],
        owners: Owners,
        *,
        quiet_seconds: float,
        recheck_seconds: float = 2.0,
    ) -> None:
        self._roots = [Path(r).absolute() for r in dict.fromkeys(roots)]
        self._owners = owners
        self._step_ms = max(1, round(quiet_seconds * 1000))
        self._recheck_ms = max(1, round(recheck_seconds * 1000))
        self._stop = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="pattern-file-watcher")

    async def aclose(self) -> None:
        """Stop watching: the watch thread sees the event within `recheck_seconds` at most."""
        self._stop.set()
        if self._task is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _existing(self) -> list[Path]:
        return await asyncio.to_thread(lambda: [r for r in self._roots if r.is_dir()])

    async def _run(self) -> None:
        watched: list[Path] | None = None  # the owners were read just before the start
        while not self._stop.is_set():
            present = await self._existing()
            if watched is not None and present != watched:
                # A root appeared or vanished: whatever it holds is new to both owners.
                await self._refresh(patterns=True, snippets=True)
            watched = present
            if not watched:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._stop.wait(), self._recheck_ms / 1000)
                continue
            try:
                await self._watch(watched)
            except (OSError, RuntimeError) as exc:  # a root vanished mid-setup, a watch limit
                log.warning("file_watch_failed", error=str(exc), roots=[str(r) for r in watched])
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._stop.wait(), self._recheck_ms / 1000)

    async def _watch(self, watched: list[Path]) -> None:
        """Until stopped or the existing roots change; empty batches are the periodic recheck.

        The first batch (or the first recheck) re-reads both owners: it covers edits made
        between the owners' last read and the moment the watch subscribed.
        """
        caught_up = False
        async for changes in awatch(
            *watched,
            stop_event=self._stop,
            step=self._step_ms,
            debounce=max(self._step_ms, _MAX_BATCH_MS),
            rust_timeout=self._recheck_ms,
            yield_on_timeout=True,
        ):
            if not caught_up:
                await self._refresh(patterns=True, snippets=True)
                caught_up = True
            elif changes:
                patterns, snippets = owners_of((path for _, path in changes), watched)
                await self._refresh(patterns=patterns, snippets=snippets)
            if await self._existing() != watched:
                return

    async def _refresh(self, *, patterns: bool, snippets: bool) -> None:
        chosen = [
            (name, refresh)
            for name, refresh, wanted in (
                ("patterns", self._owners.patterns, patterns),
                ("snippets", self._owners.snippets, snippets),
            )
            if wanted
        ]
        for name, refresh in chosen:
            try:
                if await asyncio.to_thread(refresh):
                    log.info("files_reloaded", source=name)
            except OSError as exc:
                log.warning("files_reload_failed", source=name, error=str(exc))
