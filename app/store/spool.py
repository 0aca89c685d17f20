"""Outcomes that could not be written at a stop, kept in 0600 JSON-lines files until the next start.

Blocking file I/O: callers run these functions in a worker thread.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from app.store.private import PRIVATE_FILE_MODE, ensure_private_dir
from app.store.records import JobOutcome
from app.store.tables import Job, UTCDateTime

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
