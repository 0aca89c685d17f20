"""Personal data in look-alike spellings never reaches the audit store, over real HTTP to
`genai serve`, on SQLite and PostgreSQL (issue 16: these were stored in clear).

A caller sends each shape in the prompt, a variable and the stop strings; the provider echoes
it back. The job record the API shows and every column of the row in the database hold tokens
where the values were, never the values, nor the same values read as a person reads them.
"""

# Look-alike characters (fullwidth digits, a fullwidth at-sign) are what these tests send.
# ruff: noqa: RUF001

from __future__ import annotations

import json
import unicodedata
from typing import Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import create_async_engine

from tests.security.conftest import Serve

# The shapes an adversarial pass found stored in clear, each a distinct value.
VALUES = {
    "card, no-break spaces": "4111\u00a01111\u00a01111\u00a01111",
    "card, zero-width spaces": "5500\u200b0055\u200b5555\u200b5559",
    "card, slashes": "4012/8888/8888/1881",
    "card, underscores": "6011_1111_1111_1117",
    "SSN, dots": "123.45.6789",
    "phone, 00 prefix": "0044 20 7946 0958",
    "phone, slash": "030/1234567",
    "e-mail, accented domain": "ana@bücher.de",
    "e-mail, Japanese domain": "user@例え.jp",
    "e-mail, fullwidth at-sign": "bob＠example.com",
}
CATEGORIES = {"CARD_NUMBER", "ID_CODE", "PHONE", "EMAIL"}


def _as_read(value: str) -> str:
    """Text as a person reads it: look-alikes folded (NFKC), invisible format characters gone."""
    folded = unicodedata.normalize("NFKC", value)
    return "".join(char for char in folded if unicodedata.category(char) != "Cf")


def _decoded(value: Any) -> Any:
    """A column as its content: JSON columns parsed (SQLite keeps non-ASCII in them as \\u
    escapes, which a plain search would miss), ciphertext as Latin-1 text."""
    if isinstance(value, bytes | memoryview):
        return bytes(value).decode("latin-1")
    if isinstance(value, str) and value[:1] in "[{":
        try:
            return json.loads(value)
        except ValueError:
            return value
    return value


async def _stored_rows(database_url: str) -> str:
    engine = create_async_engine(database_url)
    try:
        async with engine.connect() as conn:
            rows = (await conn.execute(text("SELECT * FROM jobs"))).all()
    finally:
        await engine.dispose()
    assert rows
    content = [{key: _decoded(value) for key, value in row._mapping.items()} for row in rows]
    return json.dumps(content, ensure_ascii=False, default=str)


def _assert_holds_none(where: str, stored: str) -> None:
    read = _as_read(stored)
    leaked = [
        shape for shape, value in VALUES.items() if value in stored or _as_read(value) in read
    ]
    assert not leaked, f"stored in clear in {where}: {leaked}"


async def test_lookalike_personal_data_is_redacted_in_the_record_and_the_database(
    database_url: str, serve: Serve
) -> None:
    values = list(VALUES.values())
    request = {
        "pattern_key": "summarize",
        "variables": {"audience": "readers of " + ", ".join(values)},
        "user_prompt": "Contact details: " + "; ".join(values),
        "params": {"stop": [f"{a} {b}" for a, b in zip(values[::2], values[1::2], strict=True)]},
    }
    with serve(GENAI_DEFAULT_MODEL="openai/gpt-4o-mini") as service:
        admin_key = service.first_admin_key()
        async with service.client(admin_key) as http:
            answer = await http.post("/v1/completions", json=request)
            assert answer.status_code == 200, answer.text
            # The caller gets its answer as the provider wrote it: only storage is redacted.
            assert all(value in answer.text for value in values)
            record = await http.get(f"/v1/jobs/{answer.json()['job_id']}")
        assert record.status_code == 200, record.text
        stored = await _stored_rows(database_url)

    job = record.json()
    assert job["status"] == "completed"
    _assert_holds_none("the job record", json.dumps(job, ensure_ascii=False))
    _assert_holds_none("the jobs table", stored)
    assert set(job["redaction_map"].values()) == CATEGORIES
    # Every place the values were sent holds tokens of each kind: the prompt (the variable in
    # its system text), the echoed answer and the stop strings.
    for part in (job["prompt_redacted"], job["response_redacted"], job["params"]["stop"]):
        assert all(f"[{category}_" in json.dumps(part) for category in CATEGORIES), part
