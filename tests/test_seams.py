"""Each layer has one face: no lower layer imports a higher one, routes use only their own deps."""

from __future__ import annotations

import re
from pathlib import Path

import grimp
import pytest

from tests.test_architecture import LAYERS, build_graph

APP = Path(__file__).resolve().parents[1] / "app"


def _modules(layers: list[grimp.Layer]) -> tuple[str, ...]:
    return tuple(f"app.{tail}" for layer in layers for tail in sorted(layer.module_tails))


# Read from the one statement of the layers (tests/test_architecture.py), not written again:
# the service and everything above it, and everything below it, which may know none of those.
_SERVICE = next(i for i, layer in enumerate(LAYERS) if "service" in layer.module_tails)
HIGHER = _modules(LAYERS[: _SERVICE + 1])
LOWER_LAYERS = _modules(LAYERS[_SERVICE + 1 :])


@pytest.fixture(scope="module")
def graph() -> grimp.ImportGraph:
    # TYPE_CHECKING imports count: a cycle hidden from the interpreter is still a cycle.
    return build_graph()


@pytest.mark.parametrize("lower", LOWER_LAYERS)
@pytest.mark.parametrize("higher", HIGHER)
def test_no_lower_layer_imports_a_higher_one(
    graph: grimp.ImportGraph, lower: str, higher: str
) -> None:
    chain = graph.find_shortest_chain(importer=lower, imported=higher, as_packages=True)
    assert chain is None, " → ".join(chain or ())


def test_only_the_completion_routes_and_their_dependency_know_the_service(
    graph: grimp.ImportGraph,
) -> None:
    importers = {m for m in graph.find_modules_that_directly_import("app.service")}
    assert {m for m in importers if m.startswith("app.api")} <= {
        "app.api.deps",
        "app.api.completions",
        "app.api.sse",  # encodes the completion stream's events as Server-Sent Events
        "app.api.chat",  # a completion route too: the OpenAI wire format over the same stream
        "app.api.messages",  # and Anthropic's
    }


def _route_modules() -> list[Path]:
    return [p for p in sorted((APP / "api").glob("*.py")) if "APIRouter(" in p.read_text()]


@pytest.mark.parametrize("module", _route_modules(), ids=lambda p: p.stem)
def test_routes_use_their_own_dependencies_not_the_runtime_or_the_service_parts(
    module: Path,
) -> None:
    text = module.read_text()
    assert "runtime" not in text.lower().replace("runtimeerror", "")
    reached = re.findall(r"\bservice\.(\w+)", text)
    assert set(reached) <= {"complete", "stream", "render", "count_tokens"}, reached
