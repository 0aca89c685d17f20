"""How a refused form action is told: the API's status and message (or the console's own reason
for a field it could not read), above the form that keeps what was typed."""

from __future__ import annotations

from app.console.api import ApiError


def said(problem: Exception) -> str:
    if isinstance(problem, ApiError):
        return f"The API refused it ({problem.status} {problem.type}): {problem.message}"
    return str(problem)


def status_of(problem: Exception) -> int:
    """The API's status, or 422 for a field the console could not read."""
    return problem.status if isinstance(problem, ApiError) else 422
