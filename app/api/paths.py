"""The doors' paths, each written once: the routes declare them, and the error dialect and load
shedding match a request against them before it is routed."""

from __future__ import annotations

from starlette.convertors import Convertor, register_url_convertor

from app.auth.protected import PROTECTED_PREFIX

V1 = PROTECTED_PREFIX  # every route but /healthz, /readyz and /metrics: each needs a key
COMPLETIONS = "/completions"
CHAT_COMPLETIONS = "/chat/completions"
MODELS = "/models"
MESSAGES = "/messages"

# The completion routes a full gateway answers 503 at the door (app/middleware/shedding.py);
# the probes and every other route are never shed there.
SHED_PATHS = frozenset({V1 + COMPLETIONS, V1 + CHAT_COMPLETIONS, V1 + MESSAGES})


class _Verbatim(Convertor[str]):
    """A path segment taken as it is; a subclass says which by its `regex`."""

    def convert(self, value: str) -> str:
        return value

    def to_string(self, value: str) -> str:
        return value


class _KeyIdConvertor(_Verbatim):
    """A key's public id (16 hex digits) as a path segment: `/v1/keys/me` then never matches a
    key route, so a method `me` lacks is answered 405, not 422 as a malformed id."""

    regex = "[0-9a-f]{16}"


# Registered once, where the paths are declared, before any router is built.
register_url_convertor("key_id", _KeyIdConvertor())
KEY_ID = "/{key_id:key_id}"

# Pattern tests (issue 19): `POST /v1/patterns/{name}/test`.
PATTERN_TEST_SUFFIX = "/test"


class _PatternNameConvertor(_Verbatim):
    """A pattern's name, slashes allowed (`email/reply`), but never one ending in `/test`: so
    `/v1/patterns/email/reply/test` is only the test route, and its `Allow` names only POST.
    (A pattern named `x/test` is still listed, rendered and tested; only GET of it is lost.)"""

    regex = r"(?!.*/test$).+"


register_url_convertor("pattern_name", _PatternNameConvertor())
PATTERN_NAME = "/{name:pattern_name}"

# Signed envelopes (issue 20): the public keys, open to anyone (app/auth/protected.py).
PROVENANCE_KEYS = "/provenance/keys"
