"""One module per console page, each with its own `router`; app/console/router.py mounts them."""

from __future__ import annotations

from fastapi import APIRouter

from app.console.pages import (
    integrity,
    jobs,
    keys,
    patterns,
    playground,
    snippets,
    teams,
    templates_pages,
    usage,
)

# In the navigation's order (app/console/web.py NAVIGATION).
PAGE_ROUTERS: tuple[APIRouter, ...] = (
    patterns.router,
    templates_pages.router,
    playground.router,
    snippets.router,
    jobs.router,
    keys.router,
    teams.router,
    usage.router,
    integrity.router,
)
