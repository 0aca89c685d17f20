"""Each layer has one face: no lower layer imports a higher one, routes use only their own deps."""

from __future__ import annotations

import re
from pathlib import Path

import grimp
import pytest

APP = Path(__file__).resolve().parents[1] / "app"
# Everything below the pipeline: none of it may know the service, the runtime or HTTP.
LOWER_LAYERS = (
    "app.audit",
    "app.catalog",
    "app.pipeline",
    "app.prompts",
    "app.providers",
    "app.routing",
    "app.snippets",
    "app.store",
    "app.tracking",
)
HIGHER = ("app.service", "app.runtime", "app.api", "app.middleware", "app.main", "app.cli")


@pytest.fixture(scope="module")
def graph() -> grimp.ImportGraph:
    # TYPE_CHECKING imports count: a cycle hidden from the interpreter is still a cycle.
    return grimp.build_graph("app")


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
