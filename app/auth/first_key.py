"""The first admin key reaches the operator, never the log stream.

In a container, under systemd or behind any log shipper, stderr *is* the log stream: a key
written there is copied into `docker logs`, the journal and log storage. So the key is shown on
the console only when that console is an operator's terminal; everywhere else it goes to a file
only its user can read, `<data_dir>/keys/first-admin-key`, and the log names that file (never
the key). The operator reads it once and deletes it.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
import tempfile
from pathlib import Path

import structlog

from app.auth.authenticator import Authenticator
from app.auth.banner import announce_first_admin_key
from app.config import Settings
from app.schemas import ApiKeyCreated
from app.store.private import ensure_private_dir

log = structlog.get_logger(__name__)

FIRST_KEY_FILE = Path("keys") / "first-admin-key"  # under the data directory


def first_key_path(data_dir: Path) -> Path:
    """Absolute, so the log line names it wherever the operator reads it from."""
    return (data_dir / FIRST_KEY_FILE).absolute()


def console_is_a_terminal(settings: Settings) -> bool:
    """An operator's terminal, not a log stream: stderr is a TTY and logs are not forced to JSON.
    `GENAI_LOG_JSON=true` (the image sets it) says a machine reads the console, as under
    `docker run -t`, whose terminal output Docker still records as the container's log."""
    return sys.stderr.isatty() and settings.log_json is not True


def _write_private(path: Path, text: str) -> None:
    """Write through a temporary file renamed into place: created 0600 with O_EXCL (mkstemp), so
    it is never readable by others, not even for an instant, and never seen half-written. A
    stale file from an earlier, emptied store is replaced."""
    ensure_private_dir(path.parent)
    fd, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "w", encoding="ascii") as handle:
            handle.write(text + "\n")
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temporary)
        raise


async def _hand_over(authenticator: Authenticator, created: ApiKeyCreated, path: Path) -> None:
    try:
        await asyncio.to_thread(_write_private, path, created.key)
    except OSError as exc:
        # A key nobody can read is only a risk: take it back. The store now counts a key as made,
        # so no later start makes another; the operator mints one explicitly.
        await authenticator.revoke(created.id)
        log.error(
            "first_admin_key_not_written",
            path=str(path),
            problem=exc.strerror or type(exc).__name__,
            hint="make an admin key with `genai keys create --scope admin`",
        )
        return
    log.warning(
        "first_admin_key_written",
        path=str(path),
        key_id=created.id,
        hint="read the key from this file once, then delete the file",
    )


def _left_on_disk(path: Path) -> bool:
    return path.exists()


async def issue_first_admin_key(authenticator: Authenticator, settings: Settings) -> None:
    """On a key store that never had a key, make one admin key and hand it to the operator."""
    created = await authenticator.create_first_admin_key()
    if created is None:
        path = first_key_path(settings.data_dir)
        if _left_on_disk(path):  # a working admin key in a file, in every backup of the volume
            log.warning("first_admin_key_file_left", path=str(path), hint="delete it once read")
        return
    if console_is_a_terminal(settings):
        announce_first_admin_key(created)
    else:
        await _hand_over(authenticator, created, first_key_path(settings.data_dir))
