"""A side-by-side line diff of two template versions, computed on the server so the page needs
no script; each row says in text (a marker) what changed, not only in colour."""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from typing import Literal

Change = Literal["same", "changed", "removed", "added"]

# What a reader of the table (or a screen reader) sees in the marker column.
MARKERS: dict[Change, str] = {"same": "", "changed": "~", "removed": "-", "added": "+"}


@dataclass(frozen=True, slots=True)
class DiffRow:
    """One row: the old line (left) and the new line (right); a side is None when absent."""

    change: Change
    old_number: int | None
    old_text: str | None
    new_number: int | None
    new_text: str | None

    @property
    def marker(self) -> str:
        return MARKERS[self.change]


def side_by_side(old: str, new: str) -> list[DiffRow]:
    """Every line of both texts, paired: equal lines side by side, a replaced block line by
    line (the longer side's extra lines alone), deleted lines left, inserted lines right."""
    old_lines, new_lines = old.splitlines(), new.splitlines()
    matcher = difflib.SequenceMatcher(a=old_lines, b=new_lines, autojunk=False)
    rows: list[DiffRow] = []
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal":
            rows.extend(
                DiffRow("same", i + 1, old_lines[i], j + 1, new_lines[j])
                for i, j in zip(range(i1, i2), range(j1, j2), strict=True)
            )
            continue
        width = max(i2 - i1, j2 - j1)
        for offset in range(width):
            i, j = i1 + offset, j1 + offset
            left = (i + 1, old_lines[i]) if i < i2 else (None, None)
            right = (j + 1, new_lines[j]) if j < j2 else (None, None)
            change: Change = (
                "changed" if left[0] and right[0] else "removed" if left[0] else "added"
            )
            rows.append(DiffRow(change, left[0], left[1], right[0], right[1]))
    return rows


def counts(rows: list[DiffRow]) -> dict[Change, int]:
    """How many rows of each kind: the summary above the table."""
    found: dict[Change, int] = {"same": 0, "changed": 0, "removed": 0, "added": 0}
    for row in rows:
        found[row.change] += 1
    return found
