"""The pattern catalog (`app.catalog`): parsing, validation, rendering, sandboxing and reloading.

Every test builds its own pattern root under `tmp_path`, except the last group, which checks
the patterns shipped in the repository.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from app.catalog import Pattern, PatternCatalog
from app.errors import (
    InvalidPattern,
    MissingVariables,
    PatternNotFound,
    PatternRenderError,
    SandboxViolation,
)
from app.tracking import pattern_content_hash

SHIPPED_ROOT = Path(__file__).resolve().parent.parent / "patterns"


def write(root: Path, name: str, text: str) -> Path:
    path = root / f"{name}.md"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def pattern_text(body: str, front: str = "description: A test pattern.\n") -> str:
    return f"---\n{front}---\n{body}"


def problems_of(adapter: PatternCatalog, name: str) -> list[str]:
    with pytest.raises(InvalidPattern) as caught:
        adapter.get(name)
    assert caught.value.name == name
    return caught.value.problems


# --- front-matter -----------------------------------------------------------------------------


def test_front_matter_fields_are_parsed_into_pattern_meta(tmp_path: Path) -> None:
    write(
        tmp_path,
        "full",
        pattern_text(
            "Summarise in {{ max_words }} words for {{ audience }}.\n",
            front=(
                "description: Summarise things.\n"
                "model_hint: anthropic/claude-sonnet-4-5\n"
                "defaults:\n  max_words: 50\n"
                "variables:\n  max_words: Word limit.\n  audience: Who reads it.\n"
                "params:\n  temperature: 0.3\n  max_tokens: 200\n"
                "tags: [summary, text]\n"
            ),
        ),
    )
    pattern = PatternCatalog(base_path=tmp_path).get("full")
    meta = pattern.meta
    assert meta.description == "Summarise things."
    assert meta.model_hint == "anthropic/claude-sonnet-4-5"
    assert meta.defaults == {"max_words": 50}
    assert meta.variables == {"max_words": "Word limit.", "audience": "Who reads it."}
    assert meta.params.temperature == 0.3
    assert meta.params.max_tokens == 200
    assert meta.tags == ["summary", "text"]
    assert pattern.referenced == frozenset({"max_words", "audience"})
    assert pattern.required_variables == ["audience"]


def test_front_matter_is_not_part_of_the_rendered_text(tmp_path: Path) -> None:
    write(tmp_path, "p", pattern_text("Body only.\n", front="description: SECRET-META\n"))
    rendered = PatternCatalog(base_path=tmp_path).apply_template("p", {})
    assert rendered.system == "Body only."
    assert "SECRET-META" not in rendered.system


def test_pattern_content_hash_is_the_hash_of_the_whole_file_including_front_matter(
    tmp_path: Path,
) -> None:
    path = write(tmp_path, "p", pattern_text("Hi\n"))
    assert PatternCatalog(base_path=tmp_path).get("p").content_hash == pattern_content_hash(
        path.read_bytes()
    )


def test_default_model_is_accepted_as_an_alias_of_model_hint(tmp_path: Path) -> None:
    write(
        tmp_path,
        "aliased",
        pattern_text("x\n", front="description: d\ndefault_model: ollama/llama3.2:3b\n"),
    )
    assert PatternCatalog(base_path=tmp_path).get("aliased").meta.model_hint == "ollama/llama3.2:3b"


def test_unknown_front_matter_key_is_invalid_and_named_while_other_patterns_still_load(
    tmp_path: Path,
) -> None:
    write(tmp_path, "typo", pattern_text("x\n", front="description: d\ntemprature: 0.2\n"))
    write(tmp_path, "good", pattern_text("Hello {{ name }}\n"))
    adapter = PatternCatalog(base_path=tmp_path)

    problems = problems_of(adapter, "typo")
    assert any("temprature" in problem for problem in problems), problems
    assert adapter.get("good").meta.description == "A test pattern."
    assert adapter.apply_template("good", {"name": "Ana"}).system == "Hello Ana"
    assert [p.name for p in adapter.loadable()] == ["good"]
    assert set(adapter.problems()) == {"typo"}
    assert adapter.names() == ["good", "typo"]


def test_invalid_pattern_error_is_a_422_with_the_problems_in_its_details(tmp_path: Path) -> None:
    write(tmp_path, "typo", pattern_text("x\n", front="description: d\nbogus: 1\n"))
    with pytest.raises(InvalidPattern) as caught:
        PatternCatalog(base_path=tmp_path).get("typo")
    assert caught.value.status_code == 422
    assert caught.value.details()["pattern"] == "typo"
    assert any("bogus" in problem for problem in caught.value.details()["problems"])


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        pytest.param("---\ndescription: [unclosed\n---\nx\n", "YAML", id="invalid-yaml"),
        pytest.param("---\n- a\n- b\n---\nx\n", "mapping", id="yaml-not-a-mapping"),
        pytest.param("Just a body, no front-matter.\n", "front-matter", id="no-front-matter"),
        pytest.param("---\ndescription: d\nbody without closing fence\n", "closed", id="unclosed"),
        pytest.param("---\ntags: [a]\n---\nx\n", "description", id="missing-description"),
        pytest.param(
            "---\ndescription: d\n---\n{% if x %}never closed\n", "Jinja", id="jinja-block"
        ),
        pytest.param("---\ndescription: d\n---\nHello {{ name \n", "Jinja", id="jinja-expression"),
        pytest.param(
            "---\ndescription: d\nparams:\n  temperature: 7\n---\nx\n",
            "temperature",
            id="bad-param",
        ),
    ],
)
def test_malformed_pattern_files_are_invalid_pattern(
    tmp_path: Path, text: str, needle: str
) -> None:
    write(tmp_path, "broken", text)
    problems = problems_of(PatternCatalog(base_path=tmp_path), "broken")
    assert any(needle in problem for problem in problems), problems


def test_non_utf8_pattern_file_is_invalid_pattern(tmp_path: Path) -> None:
    (tmp_path / "latin.md").write_bytes("---\ndescription: café\n---\nx\n".encode("latin-1"))
    problems = problems_of(PatternCatalog(base_path=tmp_path), "latin")
    assert any("UTF-8" in problem for problem in problems)


def test_declared_variable_not_used_by_the_body_is_invalid(tmp_path: Path) -> None:
    write(
        tmp_path,
        "p",
        pattern_text(
            "Hi {{ name }}\n", front="description: d\nvariables:\n  name: n\n  unused: u\n"
        ),
    )
    problems = problems_of(PatternCatalog(base_path=tmp_path), "p")
    assert problems == ["variable 'unused' is declared but never used"]


def test_variable_used_by_the_body_but_not_declared_is_invalid(tmp_path: Path) -> None:
    write(
        tmp_path,
        "p",
        pattern_text(
            "Hi {{ name }} from {{ city }}\n", front="description: d\nvariables:\n  name: n\n"
        ),
    )
    problems = problems_of(PatternCatalog(base_path=tmp_path), "p")
    assert problems == ["variable 'city' is used but not declared"]


def test_declared_variables_matching_the_body_load(tmp_path: Path) -> None:
    write(
        tmp_path,
        "p",
        pattern_text(
            "{% for item in items %}{{ item }}{{ sep }}{% endfor %}\n",
            front="description: d\nvariables:\n  items: list\n  sep: separator\n",
        ),
    )
    # Loop variables (`item`) are the template's own and need no declaration.
    assert PatternCatalog(base_path=tmp_path).get("p").referenced == frozenset({"items", "sep"})


def test_jinja_globals_are_not_treated_as_caller_variables(tmp_path: Path) -> None:
    write(
        tmp_path,
        "p",
        pattern_text(
            "{% for i in range(n) %}{{ i }}{% endfor %}\n",
            front="description: d\nvariables:\n  n: count\n",
        ),
    )
    adapter = PatternCatalog(base_path=tmp_path)
    assert adapter.get("p").required_variables == ["n"]
    assert adapter.apply_template("p", {"n": 3}).system == "012"


# --- variable precedence ----------------------------------------------------------------------

BODY = "{{ tone }}|{{ length }}\n"


def test_caller_beats_front_matter_beats_library_defaults_for_the_same_key(tmp_path: Path) -> None:
    write(tmp_path, "p", pattern_text(BODY, front="description: d\ndefaults:\n  tone: pattern\n"))
    adapter = PatternCatalog(base_path=tmp_path, defaults={"tone": "library", "length": "short"})
    assert adapter.apply_template("p", {}).system == "pattern|short"
    rendered = adapter.apply_template("p", {"tone": "caller"})
    assert rendered.system == "caller|short"
    assert rendered.variables == {"tone": "caller", "length": "short"}


def test_front_matter_default_beats_library_default(tmp_path: Path) -> None:
    write(
        tmp_path,
        "p",
        pattern_text(BODY, front="description: d\ndefaults:\n  tone: pattern\n  length: long\n"),
    )
    adapter = PatternCatalog(base_path=tmp_path, defaults={"tone": "library"})
    assert adapter.apply_template("p", {}).system == "pattern|long"


def test_caller_variable_beats_library_default(tmp_path: Path) -> None:
    write(tmp_path, "p", pattern_text(BODY))
    adapter = PatternCatalog(base_path=tmp_path, defaults={"tone": "library", "length": "short"})
    assert adapter.apply_template("p", {"tone": "caller"}).system == "caller|short"


def test_caller_variable_beats_front_matter_default(tmp_path: Path) -> None:
    write(
        tmp_path,
        "p",
        pattern_text(BODY, front="description: d\ndefaults:\n  tone: pattern\n  length: long\n"),
    )
    adapter = PatternCatalog(base_path=tmp_path)
    assert adapter.apply_template("p", {"length": "tiny"}).system == "pattern|tiny"


def test_caller_may_pass_a_falsy_value_over_a_default(tmp_path: Path) -> None:
    write(
        tmp_path,
        "p",
        pattern_text("[{{ tone }}]\n", front="description: d\ndefaults:\n  tone: x\n"),
    )
    assert PatternCatalog(base_path=tmp_path).apply_template("p", {"tone": ""}).system == "[]"


def test_rendered_variables_are_the_effective_merged_variables(tmp_path: Path) -> None:
    write(tmp_path, "p", pattern_text(BODY, front="description: d\ndefaults:\n  length: long\n"))
    adapter = PatternCatalog(base_path=tmp_path, defaults={"extra": 1})
    rendered = adapter.apply_template("p", {"tone": "t"})
    assert rendered.variables == {"extra": 1, "length": "long", "tone": "t"}


# --- missing variables ------------------------------------------------------------------------


def test_missing_variables_names_every_missing_key_sorted(tmp_path: Path) -> None:
    write(
        tmp_path,
        "p",
        pattern_text(
            "{{ zulu }} {{ alpha }} {{ mike }} {{ given }}\n{% if flag %}{{ bravo }}{% endif %}\n"
        ),
    )
    adapter = PatternCatalog(base_path=tmp_path)
    with pytest.raises(MissingVariables) as caught:
        adapter.apply_template("p", {"given": 1})
    assert caught.value.missing == ["alpha", "bravo", "flag", "mike", "zulu"]
    assert "alpha, bravo, flag, mike, zulu" in caught.value.message
    assert caught.value.details() == {
        "pattern": "p",
        "missing": ["alpha", "bravo", "flag", "mike", "zulu"],
    }


def test_missing_variables_is_a_value_error_and_a_pattern_render_error(tmp_path: Path) -> None:
    write(tmp_path, "p", pattern_text("{{ x }}\n"))
    with pytest.raises(MissingVariables) as caught:
        PatternCatalog(base_path=tmp_path).apply_template("p", {})
    assert isinstance(caught.value, ValueError)
    assert isinstance(caught.value, PatternRenderError)
    assert caught.value.error_type == "missing_variables"
    assert caught.value.status_code == 422


def test_a_variable_supplied_only_by_a_library_default_is_not_missing(tmp_path: Path) -> None:
    write(tmp_path, "p", pattern_text("{{ x }}\n"))
    adapter = PatternCatalog(base_path=tmp_path, defaults={"x": "lib"})
    assert adapter.apply_template("p", {}).system == "lib"


def test_wrong_value_shape_is_a_pattern_render_error(tmp_path: Path) -> None:
    write(tmp_path, "p", pattern_text("{% for x in items %}{{ x }}{% endfor %}\n"))
    with pytest.raises(PatternRenderError):
        PatternCatalog(base_path=tmp_path).apply_template("p", {"items": 5})


# --- sandbox ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "body",
    [
        pytest.param("{{ ''.__class__.__mro__[1].__subclasses__() }}", id="subclasses"),
        pytest.param("{{ cycler.__init__.__globals__ }}", id="cycler-globals"),
        pytest.param("{{ joiner.__init__.__globals__['os'] }}", id="joiner-globals"),
        pytest.param("{{ x.__class__.__base__ }}", id="dunder-on-variable"),
        pytest.param("{{ '{0.__class__}'.format(x) }}", id="str-format"),
    ],
)
def test_sandbox_escape_attempts_raise_sandbox_violation(tmp_path: Path, body: str) -> None:
    write(tmp_path, "evil", pattern_text(body + "\n"))
    adapter = PatternCatalog(base_path=tmp_path)
    with pytest.raises(SandboxViolation) as caught:
        adapter.apply_template("evil", {"x": "anything"})
    assert caught.value.error_type == "sandbox_violation"
    assert isinstance(caught.value, PatternRenderError)


def test_template_cannot_mutate_a_list_the_caller_passed(tmp_path: Path) -> None:
    write(tmp_path, "evil", pattern_text("{{ items.append(1) }}\n"))
    items: list[int] = [0]
    with pytest.raises(SandboxViolation):
        PatternCatalog(base_path=tmp_path).apply_template("evil", {"items": items})
    assert items == [0]


def test_template_cannot_mutate_a_dict_the_caller_passed(tmp_path: Path) -> None:
    write(tmp_path, "evil", pattern_text("{{ d.update({'owned': True}) }}{{ d.pop('k') }}\n"))
    mapping: dict[str, Any] = {"k": "v"}
    with pytest.raises(SandboxViolation):
        PatternCatalog(base_path=tmp_path).apply_template("evil", {"d": mapping})
    assert mapping == {"k": "v"}


def test_template_cannot_call_a_private_method_of_a_caller_object(tmp_path: Path) -> None:
    calls: list[str] = []

    class Target:
        def _dangerous(self) -> str:
            calls.append("called")
            return "ran"

    write(tmp_path, "evil", pattern_text("{{ obj._dangerous() }}\n"))
    with pytest.raises(SandboxViolation):
        PatternCatalog(base_path=tmp_path).apply_template("evil", {"obj": Target()})
    assert calls == []


def test_safe_jinja_features_still_render_in_the_sandbox(tmp_path: Path) -> None:
    write(
        tmp_path,
        "ok",
        pattern_text("{{ items | join(', ') }}; {{ d['k'] | upper }}; {{ items | length }}\n"),
    )
    rendered = PatternCatalog(base_path=tmp_path).apply_template(
        "ok", {"items": ["a", "b"], "d": {"k": "v"}}
    )
    assert rendered.system == "a, b; V; 2"


# --- names and layout -------------------------------------------------------------------------


def test_sub_folders_give_slash_separated_names(tmp_path: Path) -> None:
    write(tmp_path, "email/reply", pattern_text("Reply\n"))
    write(tmp_path, "code/review/deep", pattern_text("Deep\n"))
    write(tmp_path, "top", pattern_text("Top\n"))
    adapter = PatternCatalog(base_path=tmp_path)
    assert adapter.names() == ["code/review/deep", "email/reply", "top"]
    assert adapter.get("email/reply").name == "email/reply"
    assert adapter.apply_template("code/review/deep", {}).system == "Deep"


def test_files_in_snippets_are_not_patterns(tmp_path: Path) -> None:
    write(tmp_path, "snippets/footer", "no front-matter here, and that is fine\n")
    write(tmp_path, "real", pattern_text("Real\n"))
    adapter = PatternCatalog(base_path=tmp_path)
    assert adapter.names() == ["real"]
    assert adapter.problems() == {}
    with pytest.raises(PatternNotFound):
        adapter.get("snippets/footer")


def test_only_md_files_are_patterns(tmp_path: Path) -> None:
    write(tmp_path, "real", pattern_text("Real\n"))
    (tmp_path / "notes.txt").write_text(pattern_text("Not a pattern\n"), encoding="utf-8")
    assert PatternCatalog(base_path=tmp_path).names() == ["real"]


def test_unknown_name_raises_pattern_not_found(tmp_path: Path) -> None:
    write(tmp_path, "real", pattern_text("Real\n"))
    adapter = PatternCatalog(base_path=tmp_path)
    with pytest.raises(PatternNotFound) as caught:
        adapter.get("imaginary")
    assert caught.value.status_code == 404
    with pytest.raises(PatternNotFound):
        adapter.apply_template("imaginary", {})


def test_adapter_requires_at_least_one_root() -> None:
    with pytest.raises(ValueError, match="root"):
        PatternCatalog()


def test_missing_root_yields_no_patterns_and_is_reported(tmp_path: Path) -> None:
    absent = tmp_path / "absent"
    adapter = PatternCatalog(base_path=absent)
    assert adapter.names() == []
    assert adapter.missing_roots() == [str(absent)]


# --- refresh ----------------------------------------------------------------------------------


def test_edited_file_is_picked_up_after_refresh_with_new_text_and_hash(tmp_path: Path) -> None:
    path = write(tmp_path, "p", pattern_text("Version one\n"))
    adapter = PatternCatalog(base_path=tmp_path)
    old_hash = adapter.get("p").content_hash
    assert adapter.apply_template("p", {}).system == "Version one"

    path.write_text(pattern_text("Version two, longer\n"), encoding="utf-8")
    # Before refresh the in-memory index still serves the old version.
    assert adapter.apply_template("p", {}).system == "Version one"
    assert adapter.refresh() is True
    new = adapter.get("p")
    assert new.content_hash != old_hash
    assert new.content_hash == pattern_content_hash(path.read_bytes())
    assert adapter.apply_template("p", {}).system == "Version two, longer"


def test_same_size_edit_is_picked_up_when_mtime_changes(tmp_path: Path) -> None:
    path = write(tmp_path, "p", pattern_text("AAAA\n"))
    adapter = PatternCatalog(base_path=tmp_path)
    stat = path.stat()
    path.write_text(pattern_text("BBBB\n"), encoding="utf-8")
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000_000))
    assert adapter.refresh() is True
    assert adapter.apply_template("p", {}).system == "BBBB"


def test_added_file_appears_after_refresh(tmp_path: Path) -> None:
    write(tmp_path, "a", pattern_text("A\n"))
    adapter = PatternCatalog(base_path=tmp_path)
    write(tmp_path, "sub/b", pattern_text("B\n"))
    assert adapter.names() == ["a"]
    assert adapter.refresh() is True
    assert adapter.names() == ["a", "sub/b"]
    assert adapter.apply_template("sub/b", {}).system == "B"


def test_deleted_file_disappears_after_refresh(tmp_path: Path) -> None:
    write(tmp_path, "a", pattern_text("A\n"))
    doomed = write(tmp_path, "b", pattern_text("B\n"))
    adapter = PatternCatalog(base_path=tmp_path)
    doomed.unlink()
    assert adapter.refresh() is True
    assert adapter.names() == ["a"]
    with pytest.raises(PatternNotFound):
        adapter.get("b")


def test_refresh_returns_false_when_nothing_changed(tmp_path: Path) -> None:
    write(tmp_path, "a", pattern_text("A\n"))
    write(tmp_path, "bad", "no front-matter\n")
    adapter = PatternCatalog(base_path=tmp_path)
    before = adapter.get("a")
    assert adapter.refresh() is False
    assert adapter.refresh() is False
    assert adapter.get("a") is before


def test_fixing_a_broken_file_makes_it_load_after_refresh(tmp_path: Path) -> None:
    path = write(tmp_path, "p", pattern_text("x\n", front="description: d\nbogus: 1\n"))
    adapter = PatternCatalog(base_path=tmp_path)
    assert set(adapter.problems()) == {"p"}
    path.write_text(pattern_text("fixed\n"), encoding="utf-8")
    assert adapter.refresh() is True
    assert adapter.problems() == {}
    assert adapter.apply_template("p", {}).system == "fixed"


def test_breaking_a_file_makes_it_invalid_after_refresh(tmp_path: Path) -> None:
    path = write(tmp_path, "p", pattern_text("fine\n"))
    adapter = PatternCatalog(base_path=tmp_path)
    path.write_text(pattern_text("{% if %}\n"), encoding="utf-8")
    assert adapter.refresh() is True
    with pytest.raises(InvalidPattern):
        adapter.get("p")


# --- several roots ----------------------------------------------------------------------------


@pytest.fixture
def two_roots(tmp_path: Path) -> tuple[Path, Path]:
    first, second = tmp_path / "first", tmp_path / "second"
    write(first, "shared", pattern_text("from first\n"))
    write(first, "only_first", pattern_text("first only\n"))
    write(second, "shared", pattern_text("from second\n"))
    write(second, "team/only_second", pattern_text("second only\n"))
    return first, second


def test_first_root_wins_for_a_shared_name(two_roots: tuple[Path, Path]) -> None:
    first, second = two_roots
    adapter = PatternCatalog(roots=[first, second])
    assert adapter.apply_template("shared", {}).system == "from first"
    assert adapter.get("shared").base_path == str(first)
    reversed_adapter = PatternCatalog(roots=[second, first])
    assert reversed_adapter.apply_template("shared", {}).system == "from second"


def test_shadowed_reports_shared_names_with_roots_in_search_order(
    two_roots: tuple[Path, Path],
) -> None:
    first, second = two_roots
    adapter = PatternCatalog(roots=[first, second])
    assert adapter.shadowed() == {"shared": [str(first), str(second)]}


def test_names_unique_to_each_root_resolve(two_roots: tuple[Path, Path]) -> None:
    first, second = two_roots
    adapter = PatternCatalog(roots=[first, second])
    assert adapter.names() == ["only_first", "shared", "team/only_second"]
    assert adapter.apply_template("only_first", {}).system == "first only"
    assert adapter.apply_template("team/only_second", {}).system == "second only"
    assert adapter.get("team/only_second").base_path == str(second)
    assert [p.name for p in adapter.loadable()] == ["only_first", "shared", "team/only_second"]


def test_base_path_and_roots_combine_with_base_path_searched_first(
    two_roots: tuple[Path, Path],
) -> None:
    first, second = two_roots
    adapter = PatternCatalog(base_path=second, roots=[first])
    assert adapter.apply_template("shared", {}).system == "from second"


def test_a_valid_pattern_in_the_first_root_hides_a_broken_one_in_a_later_root(
    tmp_path: Path,
) -> None:
    first, second = tmp_path / "first", tmp_path / "second"
    write(first, "p", pattern_text("good\n"))
    write(second, "p", "broken, no front-matter\n")
    adapter = PatternCatalog(roots=[first, second])
    assert adapter.problems() == {}
    assert adapter.apply_template("p", {}).system == "good"


def test_a_broken_pattern_in_the_first_root_is_reported_even_if_a_later_root_has_a_good_one(
    tmp_path: Path,
) -> None:
    first, second = tmp_path / "first", tmp_path / "second"
    write(first, "p", "broken, no front-matter\n")
    write(second, "p", pattern_text("good\n"))
    adapter = PatternCatalog(roots=[first, second])
    assert set(adapter.problems()) == {"p"}
    with pytest.raises(InvalidPattern):
        adapter.get("p")


def test_refresh_covers_every_root(two_roots: tuple[Path, Path]) -> None:
    first, second = two_roots
    adapter = PatternCatalog(roots=[first, second])
    assert adapter.refresh() is False
    write(second, "late", pattern_text("late\n"))
    assert adapter.refresh() is True
    assert adapter.apply_template("late", {}).system == "late"


def test_base_path_is_the_root_as_configured_and_a_relative_one_stays_relative(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write(tmp_path / "lib", "p", pattern_text("x\n"))
    monkeypatch.chdir(tmp_path)
    relative = PatternCatalog(base_path="lib").get("p")
    assert relative.base_path == "lib"
    absolute = PatternCatalog(base_path=str(tmp_path / "lib")).get("p")
    assert absolute.base_path == str(tmp_path / "lib")
    as_path = PatternCatalog(roots=[Path("lib")]).get("p")
    assert as_path.base_path == "lib"


# --- shipped patterns -------------------------------------------------------------------------

SAMPLES: dict[str, Any] = {
    "labels": ["billing", "bug", "question"],
    "context": "The office opens at 9am.",
    "target_language": "German",
}


def shipped() -> PatternCatalog:
    return PatternCatalog(base_path=SHIPPED_ROOT)


def test_shipped_root_has_patterns_and_none_has_problems() -> None:
    adapter = shipped()
    assert adapter.names(), "no shipped patterns found"
    assert adapter.check() == {}  # compiles every body
    assert adapter.missing_roots() == []


@pytest.mark.parametrize("name", shipped().names())
def test_every_shipped_pattern_renders_with_defaults_and_sample_values(name: str) -> None:
    adapter = shipped()
    pattern: Pattern = adapter.get(name)
    assert pattern.meta.description.strip()
    unknown = set(pattern.required_variables) - SAMPLES.keys()
    assert not unknown, f"add a sample value for {sorted(unknown)}"
    rendered = adapter.apply_template(name, {v: SAMPLES[v] for v in pattern.required_variables})
    assert rendered.system.strip()
    assert "{{" not in rendered.system.replace("{{name}}", "")  # translate.md shows one literally
    for value in SAMPLES.values():
        if isinstance(value, str) and value in rendered.variables.values():
            assert value in rendered.system
