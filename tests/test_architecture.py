"""The layers of `app/` as docs/architecture.md and the README draw them, checked on the real
import graph (grimp); the drawings are checked against this list and against `app/` itself.

An import counts wherever it is written: at module level, inside a function, or under
`if TYPE_CHECKING:` (a type-only import still ties the layers together). A failure names the
offending import chain, with line numbers, so the fix is obvious from the message alone.
"""

from __future__ import annotations

import itertools
import re
import sys
import textwrap
from collections.abc import Iterable, Iterator
from pathlib import Path

import grimp
import pytest

PACKAGE = "app"
REPO = Path(__file__).resolve().parents[1]
# Each draws the layers as a tree under `app/`, one line per layer, siblings joined by " | ".
DRAWINGS = (REPO / "docs" / "architecture.md", REPO / "README.md")

# Top to bottom: a layer may import any layer below it, never one above. Names in one layer
# are independent: they may not import each other either. Each name is a folder of app/ (or one
# of the four modules at its root), so this list is `ls app/` in layer order.
LAYERS: list[grimp.Layer] = [
    grimp.Layer("cli"),  # the `genai` command; `genai serve` hands its app factory what it read
    grimp.Layer("main"),  # the ASGI app factory
    # HTTP plumbing around the routes: request context, shedding, authentication, the body
    # limit, and uvicorn's protocol bounding a request's head.
    grimp.Layer("middleware"),
    # HTTP: parse, call, shape the response | the web console, pages over the API in process
    grimp.Layer("api", "console"),
    grimp.Layer("runtime"),  # the composition root: builds, starts and closes everything long-lived
    grimp.Layer("release"),  # pattern test cases: read, run through the service, reported
    grimp.Layer("service"),  # the completion pipeline
    grimp.Layer("quotas"),  # allowlists, budgets and rate limits of keys and teams
    grimp.Layer("audit"),  # the audit trail and replay: never the service
    grimp.Layer("pipeline"),  # prompt preparation shared by the service and replay
    grimp.Layer("snippets"),
    grimp.Layer("catalog", "prompts"),  # file patterns | prompt assembly: siblings
    grimp.Layer("routing"),
    grimp.Layer("providers"),
    grimp.Layer("dialects"),  # wire formats ⇄ the conversation: pure, shared by doors and adapters
    grimp.Layer("auth"),
    grimp.Layer("webhooks"),  # release events to receivers: signed, retried, logged
    grimp.Layer("store"),
    grimp.Layer("cache"),  # the response cache: answers by key, memory or Redis; below the service
    grimp.Layer("tracking"),  # pure fingerprints and provenance
    # Concurrency limits and load shedding; when work leaves the event loop.
    grimp.Layer("concurrency"),
    # Metrics and their bounded labels, tracing, the structlog set-up, readiness.
    grimp.Layer("observability"),
    # Settings, and the genai.yaml source that knows Settings only as a class.
    grimp.Layer("config"),
    grimp.Layer("errors"),  # the one error hierarchy
    grimp.Layer("schemas"),  # every data shape that crosses a boundary
]


def build_graph(package: str = PACKAGE) -> grimp.ImportGraph:
    return grimp.build_graph(package, cache_dir=None, exclude_type_checking_imports=False)


@pytest.fixture(scope="module")
def graph() -> grimp.ImportGraph:
    return build_graph()


def _line(graph: grimp.ImportGraph, importer: str, imported: str) -> str:
    details = graph.get_import_details(importer=importer, imported=imported)
    where = ", ".join(f"line {d['line_number']}: {d['line_contents']}" for d in details)
    return f"{importer} -> {imported}" + (f"  ({where})" if where else "")


def _describe_chain(graph: grimp.ImportGraph, chain: Iterable[str]) -> str:
    return "\n      ".join(_line(graph, a, b) for a, b in itertools.pairwise(chain))


def _strongly_connected(nodes: set[str], edges: dict[str, set[str]]) -> list[set[str]]:
    """Tarjan's algorithm, iterative: every group of two or more nodes that reach each other."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[set[str]] = []
    for root in sorted(nodes):
        if root in index:
            continue
        work: list[tuple[str, Iterator[str]]] = [(root, iter(sorted(edges.get(root, ()))))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                group = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    group.add(member)
                    if member == node:
                        break
                if len(group) > 1:
                    groups.append(group)
    return groups


def module_cycles(graph: grimp.ImportGraph) -> list[str]:
    """Each import cycle between modules, as one concrete chain back to where it started."""
    edges = {m: graph.find_modules_directly_imported_by(m) for m in graph.modules}
    found = []
    for group in _strongly_connected(set(graph.modules), edges):
        start = min(group)
        step = min(edges[start] & group)
        back = graph.find_shortest_chain(importer=step, imported=start) or ()
        found.append(_describe_chain(graph, (start, *back)))
    return found


def package_cycles(graph: grimp.ImportGraph, package: str = PACKAGE) -> list[str]:
    """Cycles between the sub-packages and modules directly inside `package`."""
    children = {c for c in graph.find_children(package)}
    edges: dict[str, set[str]] = {c: set() for c in children}
    for importer in children:
        for imported in children - {importer}:
            if graph.chain_exists(importer=importer, imported=imported, as_packages=True):
                edges[importer].add(imported)
    found = []
    for group in _strongly_connected(children, edges):
        members = sorted(group)
        lines = [f"{' <-> '.join(members)}:"]
        for importer in members:
            for imported in sorted(edges[importer] & group):
                chains = graph.find_shortest_chains(
                    importer=importer, imported=imported, as_packages=True
                )
                lines.extend("  " + _describe_chain(graph, chain) for chain in sorted(chains))
        found.append("\n".join(lines))
    return found


def layer_violations(graph: grimp.ImportGraph) -> list[str]:
    illegal = graph.find_illegal_dependencies_for_layers(layers=LAYERS, containers={PACKAGE})
    found = []
    for dependency in sorted(illegal, key=lambda d: (d.importer, d.imported)):
        lines = [f"{dependency.importer} must not import {dependency.imported}:"]
        for route in dependency.routes:
            for head in sorted(route.heads):
                for tail in sorted(route.tails):
                    lines.append("  " + _describe_chain(graph, (head, *route.middle, tail)))
        found.append("\n".join(lines))
    return found


def test_no_module_imports_itself_through_others(graph: grimp.ImportGraph) -> None:
    cycles = module_cycles(graph)
    assert not cycles, "import cycles between modules:\n  " + "\n  ".join(cycles)


def test_no_two_parts_of_app_import_each_other(graph: grimp.ImportGraph) -> None:
    cycles = package_cycles(graph)
    assert not cycles, "import cycles between parts of app/:\n" + "\n".join(cycles)


def test_each_layer_imports_only_the_layers_below_it(graph: grimp.ImportGraph) -> None:
    violations = layer_violations(graph)
    assert not violations, "imports against the layers:\n" + "\n".join(violations)


def test_every_part_of_app_has_a_layer(graph: grimp.ImportGraph) -> None:
    """A new package or module must be placed in LAYERS, so nothing escapes the contract."""
    placed = {f"{PACKAGE}.{tail}" for layer in LAYERS for tail in layer.module_tails}
    assert graph.find_children(PACKAGE) <= placed, graph.find_children(PACKAGE) - placed


def test_every_layer_names_a_part_of_app(graph: grimp.ImportGraph) -> None:
    """No layer is left naming a module that moved: LAYERS stays `ls app/`, in layer order."""
    placed = {f"{PACKAGE}.{tail}" for layer in LAYERS for tail in layer.module_tails}
    assert placed <= graph.find_children(PACKAGE), placed - graph.find_children(PACKAGE)


def test_every_folder_of_app_is_a_package() -> None:
    """A folder of modules without `__init__.py` is invisible to grimp, so to every check here."""
    root = Path(__file__).resolve().parents[1] / PACKAGE
    folders = {path.parent for path in root.rglob("*.py")}
    assert not {f for f in folders if not (f / "__init__.py").exists()}


def drawn_layers(text: str) -> list[list[str]]:
    """The layers a document's ```text block under `app/` draws, top to bottom, as written
    (`catalog/`, `errors.py`)."""
    block = text.split("```text\napp/\n", 1)[1].split("```", 1)[0]
    rows = (re.match(r"[├└]── (\S+(?: \| \S+)*)", line) for line in block.splitlines())
    return [row[1].split(" | ") for row in rows if row]


@pytest.mark.parametrize("document", DRAWINGS, ids=lambda path: path.name)
def test_the_drawing_of_the_layers_is_this_list_and_is_app(document: Path) -> None:
    drawn = drawn_layers(document.read_text(encoding="utf-8"))
    tails = [[name.removesuffix("/").removesuffix(".py") for name in row] for row in drawn]
    assert [set(row) for row in tails] == [set(layer.module_tails) for layer in LAYERS]
    listed = {
        entry.name + ("/" if entry.is_dir() else "")
        for entry in (REPO / PACKAGE).iterdir()
        if entry.name != "__pycache__" and (entry.is_dir() or entry.suffix == ".py")
    }
    assert {name for row in drawn for name in row} == listed - {"__init__.py"}


def test_audit_never_imports_the_service(graph: grimp.ImportGraph) -> None:
    chains = graph.find_shortest_chains(
        importer="app.audit", imported="app.service", as_packages=True
    )
    assert not chains, "\n".join(_describe_chain(graph, chain) for chain in sorted(chains))


def test_the_checks_see_imports_made_only_for_type_checking(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The checker itself: a cycle closed only under `if TYPE_CHECKING:` is still reported."""
    package = tmp_path / "typeonly_cycle"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "low.py").write_text(
        textwrap.dedent(
            """
            from typing import TYPE_CHECKING

            if TYPE_CHECKING:
                from typeonly_cycle.high import High
            """
        )
    )
    (package / "high.py").write_text("from typeonly_cycle import low\n\nclass High: ...\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        cycles = module_cycles(build_graph("typeonly_cycle"))
        assert len(cycles) == 1
        assert "typeonly_cycle.low -> typeonly_cycle.high" in cycles[0]
        assert "line 5: from typeonly_cycle.high import High" in cycles[0]
    finally:
        sys.modules.pop("typeonly_cycle", None)
