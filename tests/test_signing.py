"""Signed envelopes (issue 20) through the API, on SQLite and PostgreSQL: every envelope (whole,
streamed, from the cache) carries a signature that the independent verifier of
tests/signing_spec.py accepts with the published keys, and that fails for one changed byte in
the answer, the provenance, the job id or the key id; a rotated-out key still verifies what it
signed. The service's own `KeyRing` must agree with the independent verifier on each case."""

from __future__ import annotations

import copy
import json
import stat
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from pydantic import SecretStr

from app.config import SigningSettings
from app.errors import ConfigurationError
from app.schemas import CompletionEnvelope, Signature, ToolCall
from app.store.signing_keys import load_signer
from app.tracking.signing import KeyRing, VerificationFailed, b64url, raw_public_key
from tests.fakes.provider_server import FakeProviderServer
from tests.signing_spec import arguments_value, check_envelope, response_hash
from tests.support import running_app, settings_for


def request(**changes: Any) -> dict[str, Any]:
    return {
        "pattern_key": "summarize",
        "variables": {"max_words": 40},
        "user_prompt": f"Revenue rose 12% ({uuid.uuid4().hex}).",
        "model": "openai/gpt-4o-mini",
        **changes,
    }


def seed_text() -> str:
    return base64url_seed(Ed25519PrivateKey.generate())


def base64url_seed(key: Ed25519PrivateKey) -> str:
    from cryptography.hazmat.primitives.serialization import Encoding, NoEncryption, PrivateFormat

    return b64url(key.private_bytes(Encoding.Raw, PrivateFormat.Raw, NoEncryption()))


async def published_keys(http: httpx.AsyncClient) -> dict[str, Any]:
    """`GET /v1/provenance/keys` with no API key at all: the route is open."""
    anonymous = http.build_request("GET", "/v1/provenance/keys")
    del anonymous.headers["Authorization"]
    resp = await http.send(anonymous)
    assert resp.status_code == 200, resp.text
    keys: dict[str, Any] = resp.json()
    return keys


async def complete(http: httpx.AsyncClient, body: dict[str, Any]) -> dict[str, Any]:
    resp = await http.post("/v1/completions", json=body)
    assert resp.status_code == 200, resp.text
    envelope: dict[str, Any] = resp.json()
    return envelope


def service_verdict(envelope: dict[str, Any], ring: KeyRing) -> str | None:
    """The service's own verifier, on the same JSON."""
    response = envelope["response"]
    calls = [
        {"id": c["id"], "name": c["name"], "arguments": arguments_value(c["arguments"])}
        for c in response.get("tool_calls", [])
    ]
    digest = response_hash(text=response["text"], tool_calls=calls, parsed=envelope.get("parsed"))
    try:
        ring.verify(
            signature=Signature.model_validate(envelope["signature"]),
            job_id=envelope["job_id"],
            provenance=envelope["provenance"],
            response=digest,
        )
    except VerificationFailed as exc:
        return str(exc)
    return None


def flipped(text: str) -> str:
    """One character changed (the last), still the same alphabet."""
    return text[:-1] + ("0" if text[-1] != "0" else "1")


async def test_envelopes_verify_and_any_changed_byte_fails(
    fake: FakeProviderServer, database_url: str
) -> None:
    settings = settings_for(fake, database_url=database_url, database_auto_migrate=True)
    async with running_app(settings) as (_, http):
        keys = await published_keys(http)
        envelope = await complete(http, request())
    ring = KeyRing.of(type_keys(keys))
    [key] = keys["keys"]
    signature = envelope["signature"]
    assert key["current"] and key["alg"] == "Ed25519" and signature["kid"] == key["kid"]
    assert signature["model"] == "openai/gpt-4o-mini"
    assert signature["signed_at"].endswith("Z")
    assert check_envelope(envelope, keys) is None
    assert service_verdict(envelope, ring) is None

    def changed(path: tuple[str, ...]) -> dict[str, Any]:
        altered = copy.deepcopy(envelope)
        holder = altered
        for name in path[:-1]:
            holder = holder[name]
        holder[path[-1]] = flipped(holder[path[-1]])
        return altered

    cases = [
        (("response", "text"), "response", "response_sha256 does not match the response"),
        (("provenance", "pattern_name"), "signature", "signature does not match"),
        (("provenance", "user_prompt_hash"), "signature", "signature does not match"),
        (("job_id",), "signature", "signature does not match"),
        (("signature", "signed_at"), "signature", "signature does not match"),
        (("signature", "kid"), "unknown key", f"unknown key id {flipped(key['kid'])!r}"),
    ]
    for path, independent, service in cases:
        altered = changed(path)
        assert check_envelope(altered, keys) == independent, path
        assert service_verdict(altered, ring) == service, path


def type_keys(keys: dict[str, Any]) -> Any:
    from app.schemas import SigningKeys

    return SigningKeys.model_validate(keys)


async def test_streamed_and_cached_envelopes_are_signed(
    fake: FakeProviderServer, database_url: str
) -> None:
    settings = settings_for(fake, database_url=database_url, database_auto_migrate=True)
    body = request(cache=True)
    async with running_app(settings) as (_, http):
        keys = await published_keys(http)
        first = await complete(http, body)
        hit = await complete(http, body)
        async with http.stream("POST", "/v1/completions", json=request(stream=True)) as resp:
            assert resp.status_code == 200
            text = (await resp.aread()).decode()
    assert (first["cache"], hit["cache"]) == ("miss", "hit")
    # A hit is signed when it is served: under its own job id, its own time.
    assert hit["job_id"] != first["job_id"]
    assert hit["signature"]["response_sha256"] == first["signature"]["response_sha256"]
    assert check_envelope(first, keys) is None and check_envelope(hit, keys) is None
    moved = {**hit, "job_id": first["job_id"]}  # a hit's signature does not cover another job
    assert check_envelope(moved, keys) == "signature"
    frames = [f for f in text.split("\n\n") if f.startswith("event: envelope")]
    [frame] = frames
    streamed = json.loads(frame.split("data: ", 1)[1])
    assert streamed["signature"]["kid"] == keys["keys"][0]["kid"]
    assert check_envelope(streamed, keys) is None


async def test_a_rotated_key_still_verifies_what_it_signed(
    fake: FakeProviderServer, database_url: str
) -> None:
    old_key, new_key = Ed25519PrivateKey.generate(), Ed25519PrivateKey.generate()
    old_public = b64url(raw_public_key(old_key.public_key()))
    before = settings_for(
        fake,
        database_url=database_url,
        database_auto_migrate=True,
        signing=SigningSettings(key=SecretStr(base64url_seed(old_key))),
    )
    async with running_app(before) as (_, http):
        old = await complete(http, request())
    after = settings_for(
        fake,
        database_url=database_url,
        database_auto_migrate=True,
        signing=SigningSettings(key=SecretStr(base64url_seed(new_key)), previous_keys=[old_public]),
    )
    async with running_app(after) as (_, http):
        keys = await published_keys(http)
        new = await complete(http, request())
    current = [k for k in keys["keys"] if k["current"]]
    previous = [k for k in keys["keys"] if not k["current"]]
    assert [k["public_key"] for k in previous] == [old_public]
    assert new["signature"]["kid"] == current[0]["kid"] != old["signature"]["kid"]
    assert old["signature"]["kid"] == previous[0]["kid"]
    assert check_envelope(old, keys) is None and check_envelope(new, keys) is None
    # Without the old key published, the old envelope names an unknown key.
    assert check_envelope(old, {"keys": current}) == "unknown key"


async def test_with_signing_off_envelopes_carry_no_signature(fake: FakeProviderServer) -> None:
    settings = settings_for(fake, signing=SigningSettings(enabled=False))
    async with running_app(settings) as (_, http):
        assert await published_keys(http) == {"keys": []}
        envelope = await complete(http, request())
    assert "signature" not in envelope
    assert not (settings.data_dir / "keys" / "signing.key").exists()


def test_the_generated_key_is_private_and_kept(tmp_path: Path) -> None:
    settings = settings_for(None, data_dir=tmp_path)
    first = load_signer(settings)
    path = tmp_path / "keys" / "signing.key"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert load_signer(settings).kid == first.kid  # read back, not replaced


@pytest.mark.parametrize(
    ("previous", "problem"),
    [(["not base64!"], "key 1 is not base64url"), ([b64url(b"short")], "got 5 bytes")],
)
def test_a_bad_previous_key_is_a_configuration_error(
    tmp_path: Path, previous: list[str], problem: str
) -> None:
    settings = settings_for(
        None, data_dir=tmp_path, signing=SigningSettings(previous_keys=previous)
    )
    with pytest.raises(ConfigurationError) as caught:
        load_signer(settings)
    assert caught.value.setting == "GENAI_SIGNING__PREVIOUS_KEYS"
    assert problem in caught.value.problem


def test_the_documented_worked_example_verifies_with_the_written_spec() -> None:
    """docs/provenance-and-audit.md's keys and envelope, checked by the independent verifier;
    and the service signs the same claims to the same bytes (Ed25519 is deterministic)."""
    text = (Path(__file__).resolve().parents[1] / "docs" / "provenance-and-audit.md").read_text()
    section = text.split("## Verifying an envelope", 1)[1].split("\n## ", 1)[0]
    blocks = [b.split("```", 1)[0] for b in section.split("```json\n")[1:]]
    keys, envelope = json.loads(blocks[1]), json.loads(blocks[2])
    assert check_envelope(envelope, keys) is None
    signer = load_signer(
        settings_for(None, signing=SigningSettings(key=SecretStr(b64url(bytes(range(32))))))
    )
    assert signer.kid == keys["keys"][0]["kid"]
    altered = {**envelope, "job_id": "0" * 32}
    assert check_envelope(altered, keys) == "signature"


def test_the_openapi_example_is_signed_and_parsed_output_and_tool_calls_are_covered() -> None:
    """The documented example envelope verifies with the documentation key; a signed envelope
    with tool calls and parsed output fails when either changes (the response hash)."""
    from app.api.openapi_examples import _examples

    example = next(v for k, v in _examples().items() if k.__name__ == "CompletionEnvelope")
    signer = load_signer(
        settings_for(None, signing=SigningSettings(key=SecretStr(b64url(bytes(range(32))))))
    )
    keys = signer.ring.published().model_dump(mode="json")
    assert check_envelope(example.model_dump(mode="json"), keys) is None
    assert isinstance(example, CompletionEnvelope)
    response = example.response.model_copy(
        update={"tool_calls": [ToolCall(id="call_1", name="lookup", arguments='{"q": "RF-2"}')]}
    )
    rich = signer.signed(example.model_copy(update={"response": response, "parsed": {"ok": 1.5}}))
    body = rich.model_dump(mode="json")
    assert check_envelope(body, keys) is None
    for change in (
        {"parsed": {"ok": 2.5}},
        {"parsed": None},
        {
            "response": {
                **body["response"],
                "tool_calls": [{**body["response"]["tool_calls"][0], "arguments": '{"q": "RF-3"}'}],
            }
        },
    ):
        assert check_envelope({**body, **change}, keys) == "response", change
    with pytest.raises(VerificationFailed, match="response_sha256"):
        signer.verify(rich.model_copy(update={"parsed": {"ok": 2.5}}))


def test_an_answer_holding_a_lone_surrogate_is_signed_and_verifies_by_the_spec() -> None:
    """A lone surrogate (which a model's answer can hold, escaped in JSON) is hashed and signed
    as U+FFFD: both verifiers agree, and the JSON a client reads back still verifies."""
    from app.api.openapi_examples import _examples

    example = next(v for k, v in _examples().items() if k.__name__ == "CompletionEnvelope")
    assert isinstance(example, CompletionEnvelope)
    signer = load_signer(
        settings_for(None, signing=SigningSettings(key=SecretStr(b64url(bytes(range(32))))))
    )
    keys = signer.ring.published().model_dump(mode="json")
    response = example.response.model_copy(update={"text": "half a pair: \ud83d here"})
    signed = signer.signed(example.model_copy(update={"response": response}))
    body = json.loads(json.dumps(signed.model_dump(mode="json")))  # through the wire, escaped
    assert body["response"]["text"] == "half a pair: \ud83d here"
    assert check_envelope(body, keys) is None
    assert service_verdict(body, signer.ring) is None
    other = {**body, "response": {**body["response"], "text": "half a pair: \ufffd here"}}
    assert check_envelope(other, keys) is None  # the documented rule: U+FFFD stands in for it
