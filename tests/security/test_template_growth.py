"""Template bodies that grow a value by a factor of their choosing, sent by an admin over real
HTTP to `genai serve`, on SQLite and PostgreSQL.

Creating a template trial-renders it, so storing one is enough to make the service build what it
builds. Each answer must be 422 render_too_large naming the template, nothing is stored,
`/healthz` answers throughout, and the service's peak RSS stays far below the gigabyte any one of
these would have built: the refusal came from an estimate, before the allocation.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import pytest

from tests.security.conftest import Serve

# Each would build about a gigabyte at the default 1,000,000-character budget.
GROWING = {
    # The issue's own: repeated fields of one long argument, `str.format` and `%`.
    "repeated-format-field": "{{ ('{0}' * 1000).format('x' * 999999) }}",
    "repeated-percent-key": "{{ ('%(a)s' * 10000) % {'a': 'x' * 99999} }}",
    # A thousand results of a filter, each within the limit, gathered into one list.
    "mapped-then-listed": "{{ range(1000)|map('center', 999999)|list|length }}",
    # json builds its indent string before it writes anything.
    "tojson-indent": "{{ 1|tojson(indent=10**9) }}",
    # Jinja folds constant filter calls while compiling, outside the render's checks.
    "folded-while-compiling": "{{ 'a'|center(999999) }}" * 300,
}
LIVENESS_SECONDS = 60  # only a hang reaches it
# The service runs in well under 200 MB; a gigabyte string would show as one.
PEAK_RSS_BYTES = 512 * 2**20


def _peak_rss(pid: int) -> int:
    """The process's high-water resident set (`VmHWM`), in bytes."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no VmHWM for process {pid}")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc for peak RSS")
async def test_an_admin_storing_a_growing_template_gets_422_before_anything_is_built(
    serve: Serve,
) -> None:
    with serve() as service:
        async with service.client(service.first_admin_key()) as http:
            for name, body in GROWING.items():
                new = {"name": name, "role": "writer", "template": body, "variables": []}
                creating = asyncio.create_task(http.post("/v1/templates", json=new))
                health = await asyncio.wait_for(http.get("/healthz"), LIVENESS_SECONDS)
                resp = await asyncio.wait_for(creating, LIVENESS_SECONDS)
                assert health.status_code == 200, name
                assert resp.status_code == 422, (name, resp.text)
                error = resp.json()["error"]
                assert error["type"] == "render_too_large", (name, error)
                assert name in error["message"], error
            assert (await http.get("/v1/templates")).json()["versions"] == []
            assert (await http.get("/healthz")).json() == {"status": "ok"}
        peak = _peak_rss(service.process.pid)
    assert peak < PEAK_RSS_BYTES, f"the service peaked at {peak / 2**20:.0f} MB:\n{service.log()}"
