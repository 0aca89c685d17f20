"""What `genai serve` proves before uvicorn starts, so the CLI, not a traceback, names a problem.

Each step raises ConfigurationError(setting, problem); the CLI prints it as one line and exits 2.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from app.auth.first_key import issue_first_admin_key
from app.config import Settings
from app.errors import ConfigurationError, GenAIError, StoreUnavailable
from app.store.db import DATABASE_URL_SETTING, check_reachable, describe_storage_error

if TYPE_CHECKING:
    from app.catalog import PatternCatalog
    from app.runtime import Runtime


async def _start(settings: Settings) -> Runtime:
    """Everything the service builds at start: keys, migrations (when auto-migrating), the
    pattern catalog, providers and the model policy."""
    try:
        return await _build_runtime(settings)
    except StoreUnavailable as exc:
        raise ConfigurationError(
            DATABASE_URL_SETTING,
            f"could not be prepared: {describe_storage_error(exc.__cause__ or exc)}",
        ) from None
    except GenAIError as exc:  # e.g. an unusable GENAI_DEFAULT_MODEL
        raise ConfigurationError("settings", exc.message) from None


async def preflight(settings: Settings) -> PatternCatalog:
    """Settings are loaded (by the caller); the store answers; the runtime builds. The pattern
    catalog it read is returned, so a single-worker server need not read every file again."""
    await check_reachable(settings)
    runtime = await _start(settings)
    try:
        if not await runtime.database.schema_is_current():
            raise ConfigurationError(
                DATABASE_URL_SETTING, "the schema is not current: run `genai db upgrade` first"
            )
        # Made here, before any worker forks, so exactly one first key is made and handed over.
        await issue_first_admin_key(runtime.authenticator, settings)
    finally:
        await runtime.aclose()
    return runtime.patterns


def run_preflight(settings: Settings) -> PatternCatalog:
    return asyncio.run(preflight(settings))


async def _build_runtime(settings: Settings) -> Runtime:
    # Imported here, not at the top: the SDKs and the store load only for commands that need them.
    from app.runtime import build_runtime

    return await build_runtime(settings)
