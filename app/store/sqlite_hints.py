"""`INDEXED BY` on SQLite: SQLAlchemy renders no table hints for this dialect, so a query's
`with_hint(table, "INDEXED BY ix_…", "sqlite")` was silently dropped. Registered once, here;
app/store/db.py imports this module, so every query the store compiles sees it."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Table
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql.compiler import SQLCompiler


@compiles(Table, "sqlite")
def _table_with_its_hint(table: Table, compiler: SQLCompiler, **kw: Any) -> str:
    rendered: str = compiler.visit_table(table, **kw)  # type: ignore[no-untyped-call]
    hint = (kw.get("fromhints") or {}).get(table)
    if hint and kw.get("asfrom") and not kw.get("ashint"):
        return f"{rendered} {hint}"
    return rendered
