"""Answers that carry text UTF-8 cannot encode still go out as valid JSON, never as a 500."""

from __future__ import annotations

import json

from app.api.responses import GatewayJSONResponse


def test_a_lone_surrogate_is_sent_as_an_ascii_escape_and_reads_back_identically() -> None:
    content = {"text": "a\ud800b", "other": "ünïcode"}
    body = GatewayJSONResponse(content).body
    assert b"\\ud800" in body
    assert json.loads(body) == content


def test_ordinary_text_stays_plain_utf8() -> None:
    body = GatewayJSONResponse({"text": "ünïcode"}).body
    assert body == '{"text":"ünïcode"}'.encode()
