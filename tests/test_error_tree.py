"""The drawing of the error hierarchy in `app/errors.py` is the hierarchy.

The module docstring draws every error class under its parent, with the status and `error.type`
where it names them. This test reads the drawing and compares it with the classes themselves, so
a new class, a moved one or a changed status cannot leave the drawing behind.
"""

from __future__ import annotations

import inspect
import re
from dataclasses import dataclass

import app.errors

# One drawn line: four spaces, the tree's rails and branch (four characters per level), a class
# name, then optionally its status and error type. A line without a name continues the one above.
_LINE = re.compile(
    r"^    (?P<rails>(?:[│ ]   )*)(?P<branch>[├└]── )?(?P<name>[A-Z]\w*)"
    r"(?:\s+(?P<status>\d{3}) (?P<type>[a-z_]+))?"
)


@dataclass(frozen=True)
class Drawn:
    parent: str | None
    status: int | None
    error_type: str | None


def drawn_tree(doc: str) -> dict[str, Drawn]:
    """Each class the drawing names, with the class drawn above it (None for a root)."""
    found: dict[str, Drawn] = {}
    path: list[str] = []  # the names from the root down to the last line read
    for line in doc.splitlines():
        match = _LINE.match(line)
        if match is None:
            continue
        depth = len(match["rails"]) // 4 + (1 if match["branch"] else 0)
        if (depth == 0) != (match["branch"] is None) or depth > len(path):
            continue  # prose in the drawing's column, not a branch of it
        del path[depth:]
        name = match["name"]
        assert name not in found, f"{name} is drawn twice"
        status = int(match["status"]) if match["status"] else None
        found[name] = Drawn(path[-1] if path else None, status, match["type"])
        path.append(name)
    return found


def real_tree() -> dict[str, str | None]:
    """Every exception class defined in app.errors, with its parent among them (None: a root)."""
    classes = {
        name: cls
        for name, cls in vars(app.errors).items()
        if inspect.isclass(cls)
        and issubclass(cls, BaseException)
        and cls.__module__ == app.errors.__name__
    }
    parents: dict[str, str | None] = {}
    for name, cls in classes.items():
        ours = [base.__name__ for base in cls.__bases__ if base.__name__ in classes]
        assert len(ours) <= 1, f"{name} has two parents in the tree: {ours}"
        parents[name] = ours[0] if ours else None
    return parents


def test_the_drawing_names_every_error_class_under_its_real_parent() -> None:
    assert app.errors.__doc__ is not None
    drawn = {name: entry.parent for name, entry in drawn_tree(app.errors.__doc__).items()}
    real = real_tree()
    assert set(drawn) == set(real), (
        f"drawn, not defined: {sorted(set(drawn) - set(real))}; "
        f"defined, not drawn: {sorted(set(real) - set(drawn))}"
    )
    wrong = {name: (drawn[name], real[name]) for name in real if drawn[name] != real[name]}
    assert not wrong, f"class: (drawn parent, real parent): {wrong}"


def test_every_status_and_type_the_drawing_names_is_the_classs_own() -> None:
    assert app.errors.__doc__ is not None
    for name, entry in drawn_tree(app.errors.__doc__).items():
        cls = getattr(app.errors, name)
        if entry.status is not None:
            assert (entry.status, entry.error_type) == (cls.status_code, cls.error_type), name


def test_the_reader_sees_a_wrong_parent_a_missing_class_and_prose() -> None:
    """The reader itself, on a small drawing: a branch, rails, continuation lines, prose."""
    doc = """Errors.

    Root                               500 internal_error
    ├── Left                           4xx: fixable
    │   │                              (400 bad_request itself)
    │   └── LeftChild                  422 left_child (with Detail)
    └── Right                          carries More
        └── RightChild                 502 right_child

Prose naming StoreUnavailable is not part of it.

    Other                              not HTTP:
                                       The CLI prints one line
"""
    assert drawn_tree(doc) == {
        "Root": Drawn(None, 500, "internal_error"),
        "Left": Drawn("Root", None, None),
        "LeftChild": Drawn("Left", 422, "left_child"),
        "Right": Drawn("Root", None, None),
        "RightChild": Drawn("Right", 502, "right_child"),
        "Other": Drawn(None, None, None),
    }
