"""The folded view of a text: what redaction's patterns see.

Each character reads as what it looks like: its NFKC form (fullwidth digits and at-signs become
ASCII, every space a plain space), any script's decimal digits as 0-9, Unicode dashes and
slashes as ASCII, and invisible characters (zero-width, format controls, variation selectors)
as nothing. `view_origins` maps the view back to the text, so only matched spans are replaced.
"""

from __future__ import annotations

import itertools
import re
import unicodedata
from typing import Final

BLANK: Final = "\uffff"
"""Stands in the view for a matched value, keeping every offset; a noncharacter, which folding
removes from the text itself, so it never occurs there."""
# Invisible but not format controls: grapheme joiner, Mongolian selectors, Hangul fillers.
_INVISIBLE = frozenset("\u034f\u180b\u180c\u180d\u180f\u115f\u1160\u3164\uffa0" + BLANK)
_LOOKALIKES = {
    **dict.fromkeys("\u2010\u2012\u2013\u2014\u2015\u2043\u2212\u2e3a\u2e3b", "-"),
    **dict.fromkeys("\u2044\u2215\u29f8", "/"),
}
FOLD_TABLE_SIZE = 16_384
"""Characters whose folded form is remembered; past it (hostile text made of many distinct
characters) folding still works, only slower, so memory stays bounded."""


def _is_variation_selector(char: str) -> bool:
    return "\ufe00" <= char <= "\ufe0f" or "\U000e0100" <= char <= "\U000e01ef"


def fold_char(char: str) -> str:
    """One character as the patterns see it: its NFKC form (fullwidth, small and font variants
    become ASCII, every space a plain space), any decimal digit as 0-9, dashes and slashes as
    ASCII, and invisible characters (zero-width, format controls, variation selectors) as none."""
    folded = []
    for part in unicodedata.normalize("NFKC", char):
        kind = unicodedata.category(part)
        if kind in ("Cf", "Me") or part in _INVISIBLE or _is_variation_selector(part):
            continue
        if kind == "Zs":
            part = " "
        elif kind == "Nd":
            part = str(unicodedata.decimal(part))
        folded.append(_LOOKALIKES.get(part, part))
    return "".join(folded)


class FoldTable(dict[int, str]):
    """A `str.translate` table filled on each character's first use, up to a bound."""

    def __missing__(self, code: int) -> str:
        folded = fold_char(chr(code))
        if len(self) < FOLD_TABLE_SIZE:
            self[code] = folded
        return folded


_NON_ASCII = re.compile(r"[^\x00-\x7f]+")


def view_origins(text: str, table: FoldTable) -> list[int]:
    """For each character of the view, the index of the original character it came from.

    Only built when a folded text holds a match; runs that fold to themselves are skipped whole.
    """
    origins: list[int] = []
    done = 0
    for run in _NON_ASCII.finditer(text):
        if run.group().translate(table) == run.group():
            continue
        origins.extend(range(done, run.start()))
        for index, char in enumerate(run.group(), run.start()):
            origins.extend(itertools.repeat(index, len(table[ord(char)])))
        done = run.end()
    origins.extend(range(done, len(text)))
    return origins
