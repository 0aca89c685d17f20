"""What an operator must see on the console at start: a new first key, or that auth is off.

Written straight to stderr, not through the logger: a key must not travel into log storage,
and these lines must stand out from the JSON log stream.
"""

from __future__ import annotations

import sys

from app.schemas import ApiKeyCreated

_RULE = "=" * 72


def announce_first_admin_key(created: ApiKeyCreated) -> None:
    sys.stderr.write(
        f"{_RULE}\n"
        "No API key existed, so one admin key was created. It is shown this once and only\n"
        "its hash is kept: store it now (e.g. export GENAI_KEY=...).\n\n"
        f"    {created.key}\n\n"
        "Make more with `genai keys create --scope complete|admin`.\n"
        f"{_RULE}\n"
    )
    sys.stderr.flush()


def warn_auth_disabled() -> None:
    sys.stderr.write(
        f"{_RULE}\n"
        "WARNING: GENAI_AUTH_DISABLED is set. Every /v1 route answers anyone, with admin\n"
        "rights. Use this only on a development machine.\n"
        f"{_RULE}\n"
    )
    sys.stderr.flush()
