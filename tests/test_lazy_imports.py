"""Start-up cost: the CLI and an unconfigured provider never import the heavy provider SDKs.

Importing anthropic and openai costs over a second of CPU; `genai patterns list` and a service
with one provider configured must not pay for the others. Checked in a fresh interpreter, since
this test process has long imported both.
"""

from __future__ import annotations

import json
import os
import sys

from tests.processes import run_process

_PROBE = """
import json, sys
from app.cli.main import cli
from app.config import Settings
from app.providers.registry import ProviderRegistry
registry = ProviderRegistry.from_settings(Settings(_env_file=None))
print(json.dumps({"configured": registry.status(),
                  "imported": sorted(m for m in ("anthropic", "openai") if m in sys.modules)}))
"""


def _probe(**env: str) -> dict[str, object]:
    clean = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("OPENAI_", "ANTHROPIC_", "GENAI_"))
    }
    result = run_process(
        [sys.executable, "-c", _PROBE],
        env={**clean, **env},
        timeout=60,
        check=True,
    )
    parsed: dict[str, object] = json.loads(result.stdout.strip().splitlines()[-1])
    return parsed


def test_no_provider_sdk_is_imported_until_its_provider_is_configured() -> None:
    found = _probe()
    assert found["imported"] == []
    assert found["configured"] == {"openai": False, "anthropic": False, "ollama": True}


def test_only_the_configured_providers_sdk_is_imported() -> None:
    found = _probe(OPENAI_API_KEY="sk-test")
    assert found["imported"] == ["openai"]
    assert found["configured"] == {"openai": True, "anthropic": False, "ollama": True}
