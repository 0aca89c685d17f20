"""The browser side of the console benchmark, run as its own process: sign in, then visit pages.

    python -m bench.console_visits BASE_URL ADMIN_KEY PAGES_JSON N

PAGES_JSON is a list of [label, path]. A path `next:/console/jobs?...` means "the next-page
link on that page" (its cursor is whatever the page hands out), resolved once before timing.
Each page is fetched twice to warm up, then N times in sequence on one keep-alive connection.
Prints one JSON object: per label the path, the statuses seen, the server's own time from
`x-genai-overhead-ms` and the wall time, each in ms.
"""

from __future__ import annotations

import html
import json
import re
import sys
import time
from typing import Any

import httpx

CSRF = re.compile(r'name="csrf" value="([^"]+)"')
NEXT_LINK = re.compile(r'href="(/console/jobs\?[^"]*cursor=[^"]*)"')
OVERHEAD = "x-genai-overhead-ms"
WARMUP = 2


def sign_in(client: httpx.Client, key: str) -> None:
    """As a browser does: the form's CSRF token (and cookie), then the session cookie."""
    form = client.get("/console/login")
    token = CSRF.search(form.text)
    if token is None:
        raise SystemExit(f"no CSRF token on /console/login ({form.status_code})")
    answer = client.post("/console/login", data={"key": key, "csrf": token[1], "next": "/console"})
    if answer.status_code != 303 or "genai_console" not in client.cookies:
        raise SystemExit(f"sign-in failed: {answer.status_code} {answer.text[:300]}")


def resolve(client: httpx.Client, path: str) -> str | None:
    """The real path to time: `next:` paths become the link to the page after; None if none."""
    if not path.startswith("next:"):
        return path
    page = client.get(path.removeprefix("next:"))
    found = NEXT_LINK.search(page.text) if page.status_code == 200 else None
    return html.unescape(found[1]) if found else None


def visit(client: httpx.Client, path: str, n: int) -> dict[str, Any]:
    statuses: dict[int, int] = {}
    server_ms: list[float] = []
    wall_ms: list[float] = []
    size = 0
    for round_ in range(WARMUP + n):
        started = time.perf_counter()
        answer = client.get(path)
        wall = (time.perf_counter() - started) * 1000
        if round_ < WARMUP:
            continue
        statuses[answer.status_code] = statuses.get(answer.status_code, 0) + 1
        size = len(answer.content)
        wall_ms.append(wall)
        if OVERHEAD in answer.headers:
            server_ms.append(float(answer.headers[OVERHEAD]))
    return {
        "path": path,
        "statuses": statuses,
        "server_ms": server_ms,
        "wall_ms": wall_ms,
        "bytes": size,
    }


def main(argv: list[str]) -> int:
    base_url, key, pages_json, n = argv[0], argv[1], argv[2], int(argv[3])
    results: dict[str, Any] = {}
    with httpx.Client(base_url=base_url, timeout=120, follow_redirects=False) as client:
        sign_in(client, key)
        for label, raw in json.loads(pages_json):
            path = resolve(client, raw)
            if path is None:
                results[label] = {"path": raw, "statuses": {}, "unresolved": True}
                continue
            results[label] = visit(client, path, n)
    print(json.dumps(results))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
