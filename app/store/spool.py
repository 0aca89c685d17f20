"""Outcomes that could not be written at a stop, kept in 0600 JSON-lines files until the next start.

The functions do blocking file I/O; `OutcomeSpool`, the AuditWriter's side of it, runs them in a
worker thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import json
import os
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import structlog

from app.store.private import PRIVATE_FILE_MODE, ensure_private_dir
from app.store.records import JobOutcome
from app.store.tables import Job, UTCDateTime

# Logged under the writer's name, as before the split: one logger for every audit write.
log = structlog.get_logger("app.store.writer")

_SPOOL_GLOB = "audit-spool-*.jsonl"
_DATETIME_COLUMNS = frozenset(
    column.name for column in Job.__table__.columns if isinstance(column.type, UTCDateTime)
)


def _to_json(value: Any) -> Any:
    if isinstance(value, dt.datetime):
        return value.isoformat()
    raise TypeError(f"{type(value).__name__} cannot be spooled")


def _from_json(row: dict[str, Any]) -> JobOutcome:
    return JobOutcome.from_row(
        {
            name: dt.datetime.fromisoformat(value)
            if name in _DATETIME_COLUMNS and isinstance(value, str)
            else value
            for name, value in row.items()
        }
    )


def write_spool(directory: Path, outcomes: Iterable[JobOutcome]) -> Path:
    """Written whole, then renamed into place: a reader never sees half a file."""
    text = "".join(json.dumps(o.as_row(), default=_to_json) + "\n" for o in outcomes)
    path = directory / f"audit-spool-{time.time_ns()}-{os.getpid()}.jsonl"
    ensure_private_dir(path.parent)
    partial = path.with_suffix(".partial")
    fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, PRIVATE_FILE_MODE)
    with os.fdopen(fd, "w", encoding="utf-8") as file:
        file.write(text)
        file.flush()
        os.fsync(file.fileno())
    os.replace(partial, path)
    return path


def spool_files(directory: Path) -> list[Path]:
    return sorted(directory.glob(_SPOOL_GLOB))


def read_spool(path: Path) -> list[JobOutcome]:
    """Raises OSError, ValueError or TypeError when the file cannot be read back."""
    text = path.read_text(encoding="utf-8")
    return [_from_json(json.loads(line)) for line in text.splitlines() if line]


class OutcomeSpool:
    """Outcomes kept across a stop while the store is down, in `directory` (None: lost, and
    logged so). A file restored at start is deleted once its records are written (`forget`)
    or spooled again."""

    def __init__(self, directory: Path | None) -> None:
        self._directory = directory
        self._restored: list[Path] = []  # files whose records are queued, not yet written

    async def save(self, outcomes: list[JobOutcome]) -> None:
        if self._directory is None:
            log.error("audit_records_lost", backlog=len(outcomes), reason="no spool directory")
            return
        path = await asyncio.to_thread(write_spool, self._directory, outcomes)
        log.warning("audit_spooled", path=str(path), records=len(outcomes))
        self.forget()  # their records are in the new file

    async def load(self) -> list[JobOutcome]:
        """Every outcome an earlier stop spooled; an unreadable file is logged and left."""
        if self._directory is None:
            return []
        loaded: list[JobOutcome] = []
        for path in await asyncio.to_thread(spool_files, self._directory):
            try:
                outcomes = await asyncio.to_thread(read_spool, path)
            except (OSError, ValueError, TypeError) as exc:
                log.error("audit_spool_unreadable", path=str(path), error_type=type(exc).__name__)
                continue
            loaded.extend(outcomes)
            self._restored.append(path)
        if loaded:
            log.info("audit_spool_restored", records=len(loaded), files=len(self._restored))
        return loaded

    def forget(self) -> None:
        """The restored files' records are written: delete the files."""
        for path in self._restored:
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
        self._restored = []
