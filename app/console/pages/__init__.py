"""One module per console page, each with its own `router`; app/console/router.py mounts them."""

from __future__ import annotations

from fastapi import APIRouter

from app.console.pages import integrity, playground, usage

PAGE_ROUTERS: tuple[APIRouter, ...] = (playground.router, usage.router, integrity.router)
