"""Lazy compilation: a scan reads front-matter only; bodies compile on first render, once per
file version; `check()` (and `genai patterns validate`) still finds every broken body."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from app.catalog import PatternCatalog
from app.catalog.pattern import Pattern
from app.errors import InvalidPattern, MissingVariables
from tests.fakes.provider_server import FakeProviderServer
from tests.pattern_corpus import SAMPLE_VARIABLES, write_pattern_corpus
from tests.support import run_cli as run
from tests.support import serve_app, settings_for

BROKEN_BODIES = {
    "syntax": ("description: d\n", "Hello {% if x %}never closed\n", "Jinja syntax error"),
    "undeclared": (
        "description: d\nvariables:\n  name: n\n",
        "Hi {{ name }} from {{ city }}\n",
        "variable 'city' is used but not declared",
    ),
    "unused": (
        "description: d\nvariables:\n  name: n\n  extra: e\n",
        "Hi {{ name }}\n",
        "variable 'extra' is declared but never used",
    ),
    "schema": (
        "description: d\noutput_schema:\n  type: 12\n",
        "Answer.\n",
        "not a valid JSON Schema",
    ),
}


def write(root: Path, name: str, front: str, body: str) -> None:
    path = root / f"{name}.md"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"---\n{front}---\n{body}", encoding="utf-8")


@pytest.fixture
def broken_root(tmp_path: Path) -> Path:
    write(tmp_path, "good", "description: Fine.\n", "Hello {{ name }}\n")
    for name, (front, body, _) in BROKEN_BODIES.items():
        write(tmp_path, f"team/{name}", front, body)
    return tmp_path


def test_a_scan_knows_front_matter_but_compiles_no_body(broken_root: Path) -> None:
    catalog = PatternCatalog(base_path=broken_root)
    assert catalog.problems() == {}  # no body was compiled, so none is known to be broken
    listed = {info.name: info.meta.description for info in catalog.loadable()}
    assert set(listed) == {"good", *(f"team/{name}" for name in BROKEN_BODIES)}
    assert catalog.info("team/syntax").content_hash.startswith("sha256:")


def test_check_compiles_every_body_and_reports_each_problem(broken_root: Path) -> None:
    catalog = PatternCatalog(base_path=broken_root)
    found = catalog.check()
    assert set(found) == {f"team/{name}" for name in BROKEN_BODIES}
    for name, (_, _, needle) in BROKEN_BODIES.items():
        assert any(needle in problem for problem in found[f"team/{name}"].problems), name
    # Once compiled, the problems are known without another check, and listing skips them.
    assert set(catalog.problems()) == set(found)
    assert [info.name for info in catalog.loadable()] == ["good"]


@pytest.mark.parametrize("name", sorted(BROKEN_BODIES))
def test_a_render_of_a_broken_body_is_invalid_pattern_every_time(
    broken_root: Path, name: str
) -> None:
    catalog = PatternCatalog(base_path=broken_root)
    needle = BROKEN_BODIES[name][2]
    for _ in range(2):  # the first render compiles, the second answers from the cache
        with pytest.raises(InvalidPattern) as caught:
            catalog.apply_template(f"team/{name}", {"name": "Ana", "x": 1})
        assert caught.value.status_code == 422
        assert any(needle in problem for problem in caught.value.problems)
    assert set(catalog.problems()) == {f"team/{name}"}


def test_a_compiled_pattern_is_kept_until_its_file_changes(tmp_path: Path) -> None:
    write(tmp_path, "p", "description: d\n", "Hello {{ name }}\n")
    catalog = PatternCatalog(base_path=tmp_path)
    first = catalog.get("p")
    assert catalog.get("p") is first
    assert catalog.refresh() is False
    assert catalog.get("p") is first
    write(tmp_path, "p", "description: d\n", "Goodbye {{ name }}, {{ city }}\n")
    assert catalog.refresh() is True
    assert catalog.get("p") is not first
    with pytest.raises(MissingVariables) as caught:
        catalog.apply_template("p", {})
    assert caught.value.missing == ["city", "name"]


def test_concurrent_first_renders_share_one_compile(tmp_path: Path) -> None:
    write(tmp_path, "p", "description: d\n", "{% for i in items %}{{ i }}{% endfor %}\n" * 50)
    catalog = PatternCatalog(base_path=tmp_path)
    start = threading.Barrier(8)
    seen: list[Pattern] = []

    def first_render() -> None:
        start.wait()
        seen.append(catalog.get("p"))

    threads = [threading.Thread(target=first_render) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(seen) == 8
    assert all(pattern is seen[0] for pattern in seen)


def test_a_generated_catalog_scans_and_renders_from_sub_folders(tmp_path: Path) -> None:
    names = write_pattern_corpus(tmp_path, 40)
    catalog = PatternCatalog(base_path=tmp_path)
    assert catalog.names() == sorted(names)
    assert catalog.check() == {}
    chat = catalog.apply_template(names[0], SAMPLE_VARIABLES)
    assert "engineers" in chat.system
    assert [m.role for m in chat.messages] == ["user", "assistant"]
    assert catalog.get(names[5]).output_schema is not None


# --- the CLI ----------------------------------------------------------------------------------


@pytest.fixture
def cli_root(broken_root: Path, cli_env: Callable[..., None]) -> Path:
    cli_env(GENAI_PATTERN_DIR=str(broken_root))
    return broken_root


def test_patterns_list_does_not_compile_so_a_broken_body_is_listed(cli_root: Path) -> None:
    result = run("patterns", "list")
    assert result.exit_code == 0, result.output
    lines = {line.split()[0]: line for line in result.stdout.splitlines()}
    assert set(lines) == {"good", *(f"team/{name}" for name in BROKEN_BODIES)}
    assert "INVALID" not in result.stdout


def test_patterns_validate_compiles_and_reports_every_broken_body(cli_root: Path) -> None:
    result = run("patterns", "validate")
    assert result.exit_code == 1, result.output
    for name, (_, _, needle) in BROKEN_BODIES.items():
        assert any(
            line.startswith(f"team/{name}:") and needle in line
            for line in result.stderr.splitlines()
        ), name
    assert f"5 patterns checked, {len(BROKEN_BODIES)} problems" in result.stdout


# --- over HTTP --------------------------------------------------------------------------------


async def test_a_broken_body_is_listed_but_answers_422_when_rendered_or_described(
    fake: FakeProviderServer, broken_root: Path
) -> None:
    async with serve_app(settings_for(fake, pattern_dir=[broken_root])) as http:
        listed = (await http.get("/v1/patterns")).json()["patterns"]
        assert "team/syntax" in {p["name"] for p in listed}
        for _ in range(2):
            resp = await http.post(
                "/v1/render", json={"pattern_key": "team/syntax", "user_prompt": "hi"}
            )
            assert resp.status_code == 422
            error = resp.json()["error"]
            assert error["type"] == "invalid_pattern"
            assert any("Jinja syntax error" in p for p in error["problems"])
        described = await http.get("/v1/patterns/team/undeclared")
        assert described.status_code == 422
        assert described.json()["error"]["type"] == "invalid_pattern"
        good = await http.get("/v1/patterns/good")
        assert good.status_code == 200
        assert good.json()["required_variables"] == ["name"]
