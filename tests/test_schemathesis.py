"""Schemathesis against the running service, every operation, with an admin key: no 5xx,
every answer conforms to the OpenAPI document, schema-valid requests pass validation and
schema-invalid ones are refused (tests/schemathesis_checks.py says what is checked and why)."""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

from tests.fakes.provider_server import FakeProviderServer
from tests.live_server import live_gateway
from tests.processes import run_process
from tests.support import REPO_ROOT, settings_for

# Cases per operation and phase: about 1,700 requests over the whole document, ~20 s.
EXAMPLES_PER_OPERATION = 25
# Fixed, so that a red CI run can be replayed exactly; change it to explore further.
SEED = 1
# Built-in checks replaced by the two in tests/schemathesis_checks.py, and one that does not
# apply: `ensure_resource_availability` expects whatever POST made to be readable at once, but
# GET /v1/snippets/{identifier} serves active snippets only, by design (404 for `active: false`).
EXCLUDED_CHECKS = "not_a_server_error,positive_data_acceptance,ensure_resource_availability"


def test_schemathesis_finds_no_server_error_and_no_answer_the_document_does_not_promise(
    fake: FakeProviderServer, tmp_path: Path
) -> None:
    st = Path(sys.executable).with_name("st")
    assert st.exists(), "schemathesis is a dev dependency: pip install -e '.[dev]'"
    with live_gateway(settings_for(fake)) as gateway:
        run = run_process(
            [
                str(st),
                "run",
                f"{gateway.base_url}/openapi.json",
                "--header",
                f"Authorization: Bearer {gateway.admin_key}",
                "--checks",
                "all",
                "--exclude-checks",
                EXCLUDED_CHECKS,
                "--max-examples",
                str(EXAMPLES_PER_OPERATION),
                "--seed",
                str(SEED),
                # NUL is refused in every string on purpose (PostgreSQL text cannot hold it),
                # a rule the document states in words only.
                "--generation-allow-x00",
                "false",
                "--generation-database",
                ":memory:",
                "--report-dir",
                str(tmp_path),
                "--no-color",
            ],
            cwd=tmp_path,
            env={
                **os.environ,
                "SCHEMATHESIS_HOOKS": "tests.schemathesis_checks",
                "PYTHONPATH": str(REPO_ROOT),
            },
            timeout=600,
            check=False,
        )
    report = run.stdout + run.stderr
    assert run.returncode == 0, report[-20_000:]
    selected = re.search(r"Selected: (\d+)/(\d+)", report)
    tested = re.search(r"Tested: (\d+)", report)
    assert selected and tested, report[-2000:]
    assert selected.group(1) == selected.group(2) == tested.group(1), report[-2000:]
