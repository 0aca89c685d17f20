"""A Python client generated from the live OpenAPI document by openapi-python-client works
against the running service, as a new user would use it: render, complete, list patterns, and
an error parsed as the document's ErrorBody."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import httpx

from tests.fakes.provider_server import FakeProviderServer
from tests.live_server import live_gateway
from tests.processes import run_process
from tests.support import settings_for

PACKAGE = "gateway_client"
BIN = Path(sys.executable).parent

# What a user writes after generating the client: nothing but the generated package, typed
# models in and out; `raise_on_unexpected_status` turns any undocumented status into an error.
USER_SCRIPT = """
import json, os
from gateway_client import AuthenticatedClient
from gateway_client.api.completions import create_completion, render_prompt
from gateway_client.api.patterns import list_patterns
from gateway_client.models import (
    CompletionEnvelope, ErrorBody, ErrorType, ModelParams, PatternList, RenderRequest,
    RenderRequestVariables, RenderResult,
)

client = AuthenticatedClient(
    base_url=os.environ["GATEWAY_URL"], token=os.environ["GATEWAY_KEY"],
    raise_on_unexpected_status=True,
)
request = RenderRequest(
    pattern_key="summarize",
    user_prompt="Quarterly revenue rose 12% while costs fell 3%.",
    variables=RenderRequestVariables.from_dict({"max_words": 60, "audience": "executives"}),
    params=ModelParams(temperature=0.2, max_tokens=200),
    model="openai/gpt-4o-mini",
)
with client as client:
    rendered = render_prompt.sync(client=client, body=request)
    assert isinstance(rendered, RenderResult), rendered
    envelope = create_completion.sync(client=client, body=request)
    assert isinstance(envelope, CompletionEnvelope), envelope
    patterns = list_patterns.sync(client=client)
    assert isinstance(patterns, PatternList), patterns
    unknown = RenderRequest(pattern_key="no-such-pattern", user_prompt="hi")
    refused = create_completion.sync_detailed(client=client, body=unknown)
    error = refused.parsed
    assert isinstance(error, ErrorBody), error
    assert isinstance(error.error.type_, ErrorType), error.error.type_

print(json.dumps({
    "rendered_messages": [m.content for m in rendered.prompt.messages],
    "rendered_variables_hash": rendered.provenance.variables_hash,
    "job_id": envelope.job_id,
    "text": envelope.response.text,
    "provider": envelope.response.provider,
    "completion_variables_hash": envelope.provenance.variables_hash,
    "temperature": envelope.params.temperature,
    "patterns": [p.name for p in patterns.patterns],
    "error_status": int(refused.status_code),
    "error_type": error.error.type_.value,
    "error_pattern": error.error.additional_properties.get("pattern"),
    "error_request_id": error.error.request_id,
    "error_request_id_header": refused.headers["x-request-id"],
}))
"""


def _generate_client(document: dict[str, Any], into: Path) -> str:
    """openapi-python-client's output for the document; its log, to check it warned of nothing."""
    spec = into / "openapi.json"
    spec.write_text(json.dumps(document))
    run = run_process(
        [
            str(BIN / "openapi-python-client"),
            "generate",
            "--path",
            str(spec),
            "--output-path",
            str(into / PACKAGE),
            "--meta",
            "none",
        ],
        cwd=into,
        env={**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"},
        timeout=300,
        check=False,
    )
    log = run.stdout + run.stderr
    assert run.returncode == 0, log
    return log


def test_a_client_generated_from_the_document_renders_completes_lists_and_parses_errors(
    fake: FakeProviderServer, tmp_path: Path
) -> None:
    with live_gateway(settings_for(fake)) as gateway:
        document = httpx.get(f"{gateway.base_url}/openapi.json", timeout=30).json()
        log = _generate_client(document, tmp_path)
        # A schema the generator cannot model silently becomes `Any` (a oneOf did once).
        assert "Warning" not in log and "Unable to process" not in log, log
        run = run_process(
            [sys.executable, "-c", USER_SCRIPT],
            cwd=tmp_path,
            env={
                **os.environ,
                "PYTHONPATH": str(tmp_path),
                "GATEWAY_URL": gateway.base_url,
                "GATEWAY_KEY": gateway.admin_key,
            },
            timeout=120,
            check=False,
        )
    assert run.returncode == 0, run.stdout + run.stderr
    seen = json.loads(run.stdout.strip().splitlines()[-1])
    assert seen["rendered_messages"][-1] == "Quarterly revenue rose 12% while costs fell 3%."
    assert len(seen["job_id"]) == 32
    assert seen["text"]
    assert seen["provider"] == "openai"
    assert seen["completion_variables_hash"] == seen["rendered_variables_hash"]
    assert seen["temperature"] == 0.2
    assert "summarize" in seen["patterns"]
    assert seen["error_status"] == 404
    assert seen["error_type"] == "pattern_not_found"
    assert seen["error_pattern"] == "no-such-pattern"
    assert seen["error_request_id"] == seen["error_request_id_header"]
    # The provider really was called once, through the generated client's completion.
    assert len(fake.calls("openai")) == 1
