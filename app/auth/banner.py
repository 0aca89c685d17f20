"""What an operator must see on the console at start: a new first key, or that auth is off.

Written straight to stderr, not through the logger, so these lines stand out from the log
lines. The key is written here only when stderr is an operator's terminal (app/auth/first_key.py
decides); anywhere else stderr is the log stream and the key goes to a private file instead.
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
