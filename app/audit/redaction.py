"""Deterministic, keyed redaction of personal data before prompts and responses are persisted.

Every match is replaced by ``[CATEGORY_<hash10>]`` where ``hash10`` is the first ten hex
characters of HMAC-SHA256(key, category + ":" + normalised value). The same value under the
same key always yields the same token, so redacted records stay joinable without storing the
raw value; without the key a token cannot be checked against a guessed value.

Patterns match a folded view of the text, in which look-alikes read as what they look like
(fullwidth digits and at-signs, non-breaking spaces, dashes; zero-width characters gone), but
what is stored is the original text with only the matched spans replaced: text without personal
data comes out unchanged, byte for byte. A value is hashed in its folded form, so one written
with other separators or look-alikes gets the same token.

Stored text is capped at MAX_REDACTED_CHARS, so only a bounded prefix of a long text is ever
scanned: the cost of redacting a multi-megabyte prompt is that of a few dozen kilobytes.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import itertools
import re
import threading
import unicodedata
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict

from app.audit.folding import BLANK, FoldTable, view_origins

MAX_REDACTED_CHARS = 20_000
"""Stored text is capped at this many characters (including the trailing ellipsis)."""
ELLIPSIS = "…"
_MARGIN = 4_096
"""Raw characters scanned past the cap: a long text's redacted prefix is what gets stored."""
_GUARD = 1_024
"""Redacted characters, counted as the patterns see them, that must follow the cap, so that a
value cut in two at the end of the scanned prefix (and so perhaps not recognised) lies wholly in
the part that is thrown away."""


class RedactionResult(BaseModel):
    """What is safe to persist: redacted text plus the category behind each token (no raw data)."""

    model_config = ConfigDict(frozen=True)

    text: str
    tokens: dict[str, str]
    truncated: bool = False


def _compact(value: str) -> str:
    """Drops separators so '4111 1111-1111 1111' and '4111111111111111' share one token."""
    return re.sub(r"[^\w+]|_", "", value).upper()


def _phone(value: str) -> str:
    """Reads a 00 prefix as '+', so '0044 20 7946 0958' and '+44 20 7946 0958' share one token."""
    compact = _compact(value)
    return "+" + compact[2:] if re.match(r"00[1-9]", compact) else compact


def _words(value: str) -> str:
    """Collapses whitespace and case so 'John  Smith' and 'john smith' share one token."""
    return " ".join(value.split()).casefold()


def _canonical_ip(value: str) -> str:
    """Uses the canonical form so '2001:DB8:0::1' and '2001:db8::1' share one token."""
    return str(ipaddress.ip_address(value))


def _is_ip(value: str) -> bool:
    """Rejects IP-shaped text that is not an address, such as times like 12:30:45."""
    try:
        ipaddress.ip_address(value)
    except ValueError:
        return False
    return True


def _luhn_ok(value: str) -> bool:
    """Only Luhn-valid 13-19 digit runs are card numbers; anything else is left to later passes."""
    digits = [int(ch) for ch in value if ch.isdecimal()]
    if not 13 <= len(digits) <= 19:
        return False
    total = 0
    for index, digit in enumerate(reversed(digits)):
        if index % 2:
            digit = digit * 2 - 9 if digit > 4 else digit * 2
        total += digit
    return total % 10 == 0


# ISO 13616 registry: country code -> IBAN length. Lower-case text must match it exactly, as
# lower-case letter+digit runs are far more common in prose than upper-case ones.
_IBAN_LENGTHS = {
    "AD": 24, "AE": 23, "AL": 28, "AT": 20, "AZ": 28, "BA": 20, "BE": 16, "BG": 22, "BH": 22,
    "BI": 27, "BR": 29, "BY": 28, "CH": 21, "CR": 22, "CY": 28, "CZ": 24, "DE": 22, "DJ": 27,
    "DK": 18, "DO": 28, "EE": 20, "EG": 29, "ES": 24, "FI": 18, "FK": 18, "FO": 18, "FR": 27,
    "GB": 22, "GE": 22, "GI": 23, "GL": 18, "GR": 27, "GT": 28, "HN": 28, "HR": 21, "HU": 28,
    "IE": 22, "IL": 23, "IQ": 23, "IS": 26, "IT": 27, "JO": 30, "KW": 30, "KZ": 20, "LB": 28,
    "LC": 32, "LI": 21, "LT": 20, "LU": 20, "LV": 21, "LY": 25, "MC": 27, "MD": 24, "ME": 22,
    "MK": 19, "MN": 20, "MR": 27, "MT": 31, "MU": 30, "NI": 28, "NL": 18, "NO": 15, "OM": 23,
    "PK": 24, "PL": 28, "PS": 29, "PT": 25, "QA": 29, "RO": 24, "RS": 22, "RU": 33, "SA": 24,
    "SC": 31, "SD": 18, "SE": 24, "SI": 19, "SK": 24, "SM": 27, "SO": 23, "ST": 25, "SV": 28,
    "TL": 23, "TN": 24, "TR": 26, "UA": 29, "VA": 22, "VG": 24, "XK": 20, "YE": 30,
}  # fmt: skip


def _iban_ok(value: str) -> bool:
    """ISO 13616 mod-97 check, so random letter+digit strings are not reported as IBANs."""
    iban = value.replace(" ", "")
    if not 15 <= len(iban) <= 34:
        return False
    if iban != iban.upper() and _IBAN_LENGTHS.get(iban[:2].upper()) != len(iban):
        return False
    rearranged = iban[4:] + iban[:4]
    return int("".join(str(int(ch, 36)) for ch in rearranged)) % 97 == 1


@dataclass(frozen=True, slots=True)
class Category:
    """One kind of personal data: how to find it, confirm it and normalise it before hashing.

    Every pattern has a ``value`` group: the part that is replaced (cues such as "Mr" stay).
    """

    name: str
    pattern: re.Pattern[str]
    validator: Callable[[str], bool] | None = None
    normalize: Callable[[str], str] = _compact
    contains: str = ""
    """A character every match holds: text without it is skipped without running the pattern."""


_UP = "A-ZÀ-ÖØ-Þ"
_MARKS = "\u0300-\u036f"  # combining accents: 'Müller' written as 'Mu' + U+0308 + 'ller'
_LOW = f"a-zß-öø-ÿ{_MARKS}"
_APOSTROPHES = "'\u2019"  # straight and typographic (U+2019) apostrophes
_NAME_WORD = rf"[{_UP}](?:[{_APOSTROPHES}-]?[{_UP}{_LOW}])*[{_LOW}]"
_EMAIL_CHARS = r"A-Za-z0-9!#$%&'*+/=?^_`{|}~.-"
# Letters of internationalised addresses. Latin, Greek and Cyrillic ones join ASCII in one word
# ('josé', 'bücher'); the other scripts' (CJK, kana, Hangul, Thai, Arabic...) form words of
# their own, as Japanese or Korean text runs straight into an address ('a@b.comです').
_JOINING = (
    "\u00c0-\u00d6\u00d8-\u00f6\u00f8-\u02af\u0300-\u036f\u0370-\u03ff\u0400-\u052f\u1e00-\u1fff"
)
_SEPARATE = (
    "\u0530-\u1dff\u2c00-\u2dff\u2e80-\u2fff\u3040-\ud7ff\uf900-\ufaff\ufb1d-\ufdff"
    "\ufe70-\ufefe\uff66-\uffdc\U00010000-\U0001efff\U00020000-\U0003ffff"
)
# Numbers count only where they are not glued onto a word ('abc4111…'): a letter, digit or '_'
# of the scripts in _JOINING. Text in the other scripts runs straight into numbers
# ('カード4111…です'), so their letters do not glue.
_GLUE = f"0-9A-Za-z_{_JOINING}"  # the body of a character class; ends with a range
_END = f"(?![{_GLUE}])"


def _start(first: str, not_after: str = "") -> str:
    """Where a number-like value may begin: at `first`, not glued onto a word nor after
    `not_after`. The look-ahead comes first: as letters of _SEPARATE no longer stop the
    look-behind, it keeps the scan of such text as cheap as it was."""
    return f"(?={first})(?<![{_GLUE}{not_after}])"


_LOCAL_CHARS = _JOINING + _EMAIL_CHARS  # ends in '-': a range must not run into it
# Labels before a dot may mix scripts; the last one may not, so text running on after the
# address ('a@b.comです') is not taken for part of it.
_DOMAIN = (
    rf"(?:[A-Za-z0-9{_JOINING}{_SEPARATE}-]++\.)+(?:[A-Za-z0-9{_JOINING}-]+|[0-9{_SEPARATE}-]+)"
)
_STREET_TYPES = (
    "Street|St|Avenue|Ave|Road|Rd|Lane|Ln|Boulevard|Blvd|Drive|Dr|Way|Court|Ct|Place|Pl|Square|Sq"
)
_STREET_SUFFIXES = "straße|strasse|gatan|vej|tie|katu"

EMAIL = Category(
    "EMAIL",
    re.compile(
        # A word's runs of one kind of letters before the last are not part of the address.
        rf"(?<![{_SEPARATE}{_LOCAL_CHARS}])"
        rf"(?:[{_SEPARATE}]++(?=[{_LOCAL_CHARS}])|[{_LOCAL_CHARS}]++(?=[{_SEPARATE}]))*+"
        rf"(?P<value>(?:[{_LOCAL_CHARS}]++|[{_SEPARATE}]++)@{_DOMAIN})"
    ),
    normalize=_words,
    contains="@",
)
IBAN = Category(
    "IBAN",
    re.compile(
        r"(?<![A-Za-z0-9])(?P<value>[A-Za-z]{2}\d{2}(?: ?[A-Za-z0-9]){11,30})(?![A-Za-z0-9])"
    ),
    _iban_ok,
)
CARD_NUMBER = Category(
    "CARD_NUMBER",
    # Not inside a longer number (a digit and "-" or "." before it), but after "ref-" it counts.
    # Slashes and underscores only between groups of 4 (Amex 4-6-5), which dates and paths
    # rarely are.
    re.compile(
        _start(r"\d", "+") + r"(?<!\d[.-])(?P<value>\d(?:[ .-]?\d){12,18}"
        r"|\d{4}(?P<sep>[/_])(?:\d{4}(?P=sep)\d{4}(?P=sep)\d{1,4}(?:(?P=sep)\d{1,3})?"
        r"|\d{6}(?P=sep)\d{4,5}))" + _END
    ),
    _luhn_ok,
)
IP_ADDRESS = Category(
    "IP_ADDRESS",
    re.compile(
        _start("[0-9A-Fa-f:]", ":.") + r"(?P<value>(?:[0-9A-Fa-f]{0,4}:){2,7}"
        r"(?:[0-9A-Fa-f]{1,4}|\d{1,3}(?:\.\d{1,3}){3})?|\d{1,3}(?:\.\d{1,3}){3})(?!\.\d)" + _END
    ),
    _is_ip,
    _canonical_ip,
)
PHONE = Category(
    "PHONE",
    re.compile(
        # +CC, or 00CC and a separator (unlike a zero-padded number): 7-15 digits in all
        _start(r"[+(\d]", "+.-")
        + r"(?P<value>(?:\+|00(?=[1-9]\d{0,3}[ ./-]))(?:\d[ ./()-]{0,2}){6,14}\d"
        r"|(?:\(\d{3}\)[ .-]?|\d{3}[ .-])\d{3}[ .-]\d{4}"  # (555) 123-4567, 555.123.4567
        r"|(?:\(0\d{1,4}\)[ -]?|0\d{1,4}[ -])\d{3,8}(?:[ -]\d{2,4}){0,2}"  # 030 1234567
        r"|0\d{1,4}/\d{5,8}"  # 030/1234567, but not a month/year such as 01/2026
        r"|0\d(?:[ .]\d{2}){4})" + _END  # 01 23 45 67 89
    ),
    normalize=_phone,
)
ID_CODE = Category(
    "ID_CODE",
    re.compile(
        _start("[0-9A-Z]", "-")
        + r"(?P<value>\d{3}(?P<sep>[- ])\d{2}(?P=sep)\d{4}"  # US SSN, dashed or spaced
        r"|(?<!\d\.)\d{3}\.\d{2}\.\d{4}(?!\.\d)"  # or dotted, but not within a version
        r"|[1-6]\d{10}|\d{6}[-+A]\d{3}[0-9A-Y]"  # Estonian / Finnish personal codes
        r"|[A-Z]{2} ?\d{2} ?\d{2} ?\d{2} ?[A-D]"  # UK National Insurance number
        r"|[A-Z]\d{7,8}|[A-Z]{2}\d{6,7})" + _END  # passport-like, 8-9 characters
    ),
)
ADDRESS_LINE = Category(
    "ADDRESS_LINE",
    re.compile(
        rf"(?<!\w)(?P<value>\d{{1,5}}[A-Za-z]?(?:[ \t]+[{_UP}][\w{_APOSTROPHES}.-]*){{1,4}}?"
        rf"[ \t]+(?:{_STREET_TYPES})\b\.?(?:[ \t]+(?:NE|NW|SE|SW|N|S|E|W)\b)?"
        rf"|(?:[{_UP}]\w*[ \t]+)?(?:[{_UP}]\w*(?:{_STREET_SUFFIXES})|Stra(?:ß|ss)e)"
        r"[ \t]+\d{1,5}[A-Za-z]?(?!\w))"
    ),
    normalize=_words,
)
SIMPLE_NAME = Category(
    "SIMPLE_NAME",
    re.compile(
        r"(?:\b(?:Mrs|Mr|Ms|Dr|Prof)\.?[ \t]+"
        rf"|(?i:\bmy name is|\bi am|\bi[{_APOSTROPHES}]m|\bname:|\bsigned,)\s*)"
        rf"(?P<value>{_NAME_WORD}(?:[ \t]+{_NAME_WORD}){{0,2}})(?![\w{_MARKS}])"
    ),
    normalize=_words,
)
NUMBER = Category("NUMBER", re.compile(_start(r"\d", ".,") + r"(?P<value>\d{6,})(?![.,]\d)" + _END))

CATEGORIES: tuple[Category, ...] = (
    EMAIL,
    IBAN,
    CARD_NUMBER,
    IP_ADDRESS,
    PHONE,
    ID_CODE,
    ADDRESS_LINE,
    SIMPLE_NAME,
    NUMBER,
)
"""Fixed pass order; it alone decides overlaps, because each pass sees the previous one's output.

Most specific first: EMAIL swallows any digits inside an address; checksum-validated IBAN and
CARD_NUMBER run before the loose digit patterns so a card is not eaten as a PHONE or NUMBER;
IP_ADDRESS precedes PHONE so dotted quads stay addresses; PHONE and ID_CODE precede the
word-based ADDRESS_LINE and SIMPLE_NAME; NUMBER is the catch-all for digit runs left over.
"""

_NAMES = "|".join(category.name for category in CATEGORIES)
TOKEN_RE = re.compile(rf"\[(?P<category>{_NAMES})_[0-9a-f]{{10}}\]")
"""Matches tokens; text inside them is never re-scanned, which makes redaction idempotent."""
_DONE_SPLIT_RE = re.compile(f"({BLANK}{BLANK}*)")  # not `+`: a literal start is found faster
"""Splits the view at what is not scanned again: values already matched, tokens given."""
_SEPARATORS = " -./_"


def _accept(category: Category, value: str) -> str | None:
    """Longest validator-passing prefix, so 'IBAN … EUR' still finds the IBAN before 'EUR'."""
    if category.validator is None:
        return value
    while not category.validator(value):
        cut = max(value.rfind(separator) for separator in _SEPARATORS)
        if cut <= 0:
            return None
        value = value[:cut].rstrip(_SEPARATORS)
    return value


def _truncate(text: str, limit: int = MAX_REDACTED_CHARS) -> tuple[str, bool]:
    """Caps stored text; never splits a token, so no fragment of it can be mistaken for data."""
    if len(text) <= limit:
        return text, False
    cut = max(0, limit - len(ELLIPSIS))
    for match in TOKEN_RE.finditer(text, max(0, cut - 64), cut + 64):
        if match.start() < cut < match.end():
            cut = match.start()
    return text[:cut] + ELLIPSIS, True


def _result(text: str, truncated: bool) -> RedactionResult:
    tokens = {match.group(0): match.group("category") for match in TOKEN_RE.finditer(text)}
    return RedactionResult(text=text, tokens=tokens, truncated=truncated)


def clip(result: RedactionResult, limit: int) -> RedactionResult:
    """A redacted text capped to a shorter column (tokens are longer than most values)."""
    text, truncated = _truncate(result.text, limit)
    return result if not truncated else _result(text, truncated=True)


_RELEASE_DATE = re.compile(
    r"((?:(?<=[-_@])|^)20\d\d(?:0[1-9]|1[0-2])(?:0[1-9]|[12]\d|3[01])(?=$|[-_.:@/]))"
)
"""A release stamp in a model name (claude-3-5-sonnet-20241022, claude-3-opus@20240229)."""


class Redactor:
    """Replaces personal data with keyed, stable tokens; pure apart from the key it is given.

    Thread-safe: large texts are redacted off the event loop while small ones use the cache.
    """

    def __init__(self, key: bytes, *, cache_size: int = 1024) -> None:
        if not key:
            raise ValueError("redaction key must not be empty: tokens would be guessable")
        self._key = key
        # System prompts repeat across requests (same pattern, same variables): results are
        # cached in memory only, never persisted, and bounded by count.
        self._cache: OrderedDict[str, RedactionResult] = OrderedDict()
        self._cache_size = cache_size
        self._cache_lock = threading.Lock()
        self._folds = FoldTable()

    def fold(self, text: str) -> str:
        """The text as the patterns see it; ASCII text, which has no look-alikes, as it is."""
        return text if text.isascii() else text.translate(self._folds)

    def token_for(self, category: Category, value: str) -> str:
        """The token for one value; exposed so callers can look up a known value's token.

        Hashes the folded value (composed, as NFKC composes accents), so look-alikes and other
        separators give the same token."""
        if not value.isascii():
            value = unicodedata.normalize("NFKC", self.fold(value))
        message = f"{category.name}:{category.normalize(value)}".encode()
        digest = hmac.new(self._key, message, hashlib.sha256).hexdigest()
        return f"[{category.name}_{digest[:10]}]"

    def redact(self, text: str) -> RedactionResult:
        """Runs all passes until nothing changes (so re-redacting is a no-op), then truncates."""
        cacheable = len(text) <= MAX_REDACTED_CHARS and self._cache_size > 0
        if cacheable:
            with self._cache_lock:
                cached = self._cache.get(text)
                if cached is not None:
                    self._cache.move_to_end(text)
                    return cached
        result = self._redact(text)
        if cacheable:
            with self._cache_lock:
                self._cache[text] = result
                if len(self._cache) > self._cache_size:
                    self._cache.popitem(last=False)
        return result

    def redact_data(self, value: Any) -> tuple[Any, dict[str, str]]:
        """Every string in a JSON-like value redacted, dict keys included; the tokens merged."""
        tokens: dict[str, str] = {}

        def walk(item: Any) -> Any:
            if isinstance(item, str):
                redacted = self.redact(item)
                tokens.update(redacted.tokens)
                return redacted.text
            if isinstance(item, dict):
                return {walk(key): walk(inner) for key, inner in item.items()}
            if isinstance(item, list | tuple):
                return [walk(inner) for inner in item]
            return item

        return walk(value), tokens

    def redact_model_name(self, name: str) -> RedactionResult:
        """A model name as stored: redacted like any text, except its release-date stamps.

        Real names carry dates (claude-3-5-sonnet-20241022) that the NUMBER pass would turn
        into tokens; a 20YYMMDD stamp at a name-part boundary stays clear, everything else in
        the name (a card number, an e-mail) is redacted. The capability catalog cannot decide
        this: it holds shell patterns (claude-sonnet-4*), which any suffix would match.
        """
        pieces = _RELEASE_DATE.split(name)  # odd indices are the release stamps
        text = "".join(
            piece if index % 2 else self.redact(piece).text for index, piece in enumerate(pieces)
        )
        return _result(text, truncated=False)

    def _redact(self, text: str) -> RedactionResult:
        """Redacts a prefix big enough to fill the cap; widens it when redaction shrank it."""
        end = MAX_REDACTED_CHARS + _MARGIN
        while end < len(text):
            redacted = self._passes(text[:end])
            # Invisible padding must not stretch a value from past the prefix into what is kept.
            if len(self.fold(redacted[MAX_REDACTED_CHARS:])) >= _GUARD:
                break
            end *= 2  # long values became short tokens: the cut could show in what is kept
        else:
            redacted = self._passes(text)
        return _result(*_truncate(redacted))

    def _passes(self, text: str) -> str:
        """Every pass until nothing changes, on the folded view; then the matched spans, and only
        they, are replaced in the original text."""
        view = self.fold(text)
        found: list[tuple[int, int, str]] = []
        marked = (
            TOKEN_RE.sub(lambda token: BLANK * len(token.group()), view) if "[" in view else view
        )
        # Round and round in the fixed order until every category has seen the text as it now
        # is: stopping there, not at the end of a round, saves a round's tail and changes nothing.
        unchanged = 0
        for category in itertools.cycle(CATEGORIES):
            if unchanged == len(CATEGORIES):
                break
            applied = self._apply(category, marked, found)
            unchanged = unchanged + 1 if applied is marked else 0
            marked = applied
        if not found:
            return text
        origins = None if view == text else view_origins(text, self._folds)
        pieces: list[str] = []
        done = 0
        for start, end, token in sorted(found):
            if origins is not None:
                start, end = max(origins[start], done), origins[end - 1] + 1
            pieces += (text[done:start], token)
            done = end
        pieces.append(text[done:])
        return "".join(pieces)

    def _apply(self, category: Category, view: str, found: list[tuple[int, int, str]]) -> str:
        """One pass of one category over the view between tokens and earlier matches: each
        match is added to `found` and blanked out, so every offset keeps pointing at the text."""
        pieces: list[str] = []
        done = offset = 0
        for index, piece in enumerate(_DONE_SPLIT_RE.split(view)):
            if not index % 2 and category.contains in piece:
                for match in category.pattern.finditer(piece):
                    accepted = _accept(category, match.group("value"))
                    if accepted is None:
                        continue
                    start = offset + match.start("value")
                    end = start + len(accepted)
                    found.append((start, end, self.token_for(category, accepted)))
                    pieces += (view[done:start], BLANK * (end - start))
                    done = end
            offset += len(piece)
        if not pieces:
            return view
        pieces.append(view[done:])
        return "".join(pieces)
