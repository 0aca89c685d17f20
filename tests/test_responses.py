"""Answers that carry text UTF-8 cannot encode still go out as valid JSON, never as a 500."""

from __future__ import annotations

import json

from app.api.responses import GatewayJSONResponse
from app.schemas import Message, Usage


def test_a_lone_surrogate_is_sent_as_an_ascii_escape_and_reads_back_identically() -> None:
    content = {"text": "a\ud800b", "other": "ünïcode"}
    body = bytes(GatewayJSONResponse(content).body)
    assert b"\\ud800" in body
    assert json.loads(body) == content


def test_ordinary_text_stays_plain_utf8() -> None:
    body = GatewayJSONResponse({"text": "ünïcode"}).body
    assert body == '{"text":"ünïcode"}'.encode()


def test_a_model_is_written_by_pydantic_exactly_as_its_json_dump() -> None:
    usage = Usage(input_tokens=3, output_tokens=4, total_tokens=7)
    body = bytes(GatewayJSONResponse(usage).body)
    assert json.loads(body) == usage.model_dump(mode="json")


def test_a_model_holding_a_lone_surrogate_is_sent_with_ascii_escapes() -> None:
    message = Message(role="assistant", content="a\ud800b ü")
    body = bytes(GatewayJSONResponse(message).body)
    assert b"\\ud800" in body
    assert json.loads(body) == {"role": "assistant", "content": "a\ud800b ü"}


def test_an_integer_wider_than_64_bits_is_still_valid_json() -> None:
    body = bytes(GatewayJSONResponse({"n": 2**70}).body)
    assert json.loads(body) == {"n": 2**70}
