"""The one file watcher (`app.catalog.watch`): edits to pattern and snippet files reach a
running catalog without polling; a missing root is picked up once it appears; it stops cleanly.
Tests poll for the change with a generous bound; no timing is asserted."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from app.catalog import PatternCatalog
from app.catalog.watch import FileWatcher, Owners, owners_of
from app.errors import PatternNotFound
from app.snippets.files import FileSnippets


def write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


def pattern(body: str) -> str:
    return f"---\ndescription: d\n---\n{body}"


async def eventually(check: Callable[[], bool], *, tries: int = 600) -> bool:
    """True once `check()` holds; gives up after `tries` short sleeps (about 30 s)."""
    for _ in range(tries):
        if check():
            return True
        await asyncio.sleep(0.05)
    return check()


def renders(catalog: PatternCatalog, name: str, expected: str) -> Callable[[], bool]:
    def check() -> bool:
        try:
            return catalog.apply_template(name, {}).system == expected
        except PatternNotFound:
            return False

    return check


@pytest.fixture
async def watched(tmp_path: Path) -> AsyncIterator[tuple[Path, PatternCatalog, FileSnippets]]:
    root = tmp_path / "root"
    write(root / "hello.md", pattern("Say hello."))
    write(root / "snippets" / "tone.md", "---\nname: Tone\n---\nBe brief.\n")
    catalog = PatternCatalog(base_path=root)
    snippets = FileSnippets([root])
    snippets.refresh()
    owners = Owners(patterns=catalog.refresh, snippets=snippets.refresh)
    watcher = FileWatcher([root], owners, quiet_seconds=0.05, recheck_seconds=0.1)
    watcher.start()
    try:
        yield root, catalog, snippets
    finally:
        await asyncio.wait_for(watcher.aclose(), 30)


async def test_an_edited_pattern_file_is_seen_by_the_running_watcher(
    watched: tuple[Path, PatternCatalog, FileSnippets],
) -> None:
    root, catalog, _ = watched
    write(root / "hello.md", pattern("Say hello warmly."))
    write(root / "team" / "added.md", pattern("New in a sub-folder."))
    assert await eventually(renders(catalog, "hello", "Say hello warmly."))
    assert await eventually(renders(catalog, "team/added", "New in a sub-folder."))


async def test_an_edited_snippet_file_is_seen_by_the_running_watcher(
    watched: tuple[Path, PatternCatalog, FileSnippets],
) -> None:
    root, _, snippets = watched
    write(root / "snippets" / "tone.md", "---\nname: Tone\n---\nBe thorough.\n")

    def updated() -> bool:
        snippet = snippets.get("tone")
        return snippet is not None and snippet.text == "Be thorough."

    assert await eventually(updated)


async def test_a_root_that_appears_later_is_watched_once_it_exists(tmp_path: Path) -> None:
    root = tmp_path / "later"
    catalog = PatternCatalog(base_path=root)
    snippets = FileSnippets([root])
    watcher = FileWatcher(
        [root],
        Owners(patterns=catalog.refresh, snippets=snippets.refresh),
        quiet_seconds=0.05,
        recheck_seconds=0.05,
    )
    watcher.start()
    try:
        write(root / "first.md", pattern("First."))
        assert await eventually(renders(catalog, "first", "First."))
        write(root / "first.md", pattern("First, edited."))
        assert await eventually(renders(catalog, "first", "First, edited."))
    finally:
        await asyncio.wait_for(watcher.aclose(), 30)


async def test_the_watcher_stops_cleanly_with_no_root_at_all(tmp_path: Path) -> None:
    calls: list[str] = []

    def reread_patterns() -> bool:
        calls.append("p")
        return True

    owners = Owners(patterns=reread_patterns, snippets=lambda: False)
    watcher = FileWatcher([tmp_path / "missing"], owners, quiet_seconds=0.05)
    watcher.start()
    await asyncio.sleep(0.1)
    await asyncio.wait_for(watcher.aclose(), 30)
    assert calls == []  # nothing existed, so nothing was re-read


def test_changes_route_to_their_owner(tmp_path: Path) -> None:
    first, second = tmp_path / "a", tmp_path / "b"
    roots = [first, second]
    assert owners_of([str(first / "x.md")], roots) == (True, False)
    assert owners_of([str(second / "team" / "y.md")], roots) == (True, False)
    assert owners_of([str(second / "snippets" / "s.md")], roots) == (False, True)
    assert owners_of([str(first / "snippets" / "s.md"), str(second / "z.md")], roots) == (
        True,
        True,
    )
    assert owners_of([str(first)], roots) == (True, True)  # a root itself appeared or vanished
    assert owners_of([str(tmp_path / "elsewhere.md")], roots) == (False, False)
