"""`genai verify ENVELOPE.json` and `genai provenance keys`: signed envelopes, checked offline.

`verify` reads whatever carries `provenance` and `signature`: the native envelope
(`POST /v1/completions`), an OpenAI door `chat.completion` body or an Anthropic door `message`
body. It recomputes the response hash from what the body returned and checks the Ed25519
signature over the claims (docs/provenance-and-audit.md, "Verifying an envelope").

Exit codes: 0 valid; 1 the envelope does not verify (one line: what fails); 2 bad input (a file
that cannot be read or is not a signed answer, keys that cannot be read), one line.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import httpx
import typer
from pydantic import ValidationError

from app.config import get_settings
from app.errors import ConfigurationError
from app.schemas import Signature, SigningKeys
from app.store.signing_keys import load_signer, local_keys
from app.tracking.signing import KeyRing, VerificationFailed, response_sha256, tool_arguments

provenance_cli = typer.Typer(help="Signed envelopes: the keys that verify them.")

_KEYS_TIMEOUT_SECONDS = 10.0


def provenance_keys() -> None:
    """Print the public keys that verify this installation's envelopes, as
    `GET /v1/provenance/keys` answers (current first)."""
    typer.echo(load_signer(get_settings()).ring.published().model_dump_json(indent=2))


provenance_cli.command("keys")(provenance_keys)


def _json(text: str, *, what: str) -> Any:
    try:
        return json.loads(text)
    except ValueError as exc:
        raise ConfigurationError(what, f"is not JSON ({exc})") from None


def _read(path: Path, *, what: str) -> Any:
    try:
        return _json(path.read_text(encoding="utf-8"), what=what)
    except (OSError, UnicodeDecodeError) as exc:
        problem = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise ConfigurationError(what, f"cannot be read: {problem}") from None


def _keys_from(source: str) -> KeyRing:
    what = f"--keys {source}"
    if source.startswith(("http://", "https://")):
        try:
            answer = httpx.get(source, timeout=_KEYS_TIMEOUT_SECONDS, follow_redirects=True)
            answer.raise_for_status()
        except httpx.HTTPError as exc:
            raise ConfigurationError(what, f"cannot be fetched: {exc}") from None
        data = _json(answer.text, what=what)
    else:
        data = _read(Path(source), what=what)
    try:
        return KeyRing.of(SigningKeys.model_validate(data))
    except ValidationError:
        raise ConfigurationError(
            what, 'is not a key list: {"keys": [{"kid", "alg", "public_key", "current"}]}'
        ) from None
    except ValueError as exc:
        raise ConfigurationError(what, str(exc)) from None


def _calls(items: list[dict[str, Any]], *, anthropic: bool) -> list[dict[str, Any]]:
    if anthropic:  # tool_use blocks: the arguments are the `input` object already
        return [{"id": c["id"], "name": c["name"], "arguments": c["input"]} for c in items]
    return [  # OpenAI tool calls: the arguments as text
        {
            "id": c["id"],
            "name": c["function"]["name"],
            "arguments": tool_arguments(c["function"]["arguments"]),
        }
        for c in items
    ]


def _response_sha256(body: dict[str, Any]) -> str:
    """Recomputed from what the body returned, whichever door answered."""
    parsed = body.get("parsed")
    if body.get("object") == "chat.completion":
        message = body["choices"][0]["message"]
        text = message.get("content") or ""
        return response_sha256(
            text=text,
            tool_calls=_calls(message.get("tool_calls") or [], anthropic=False),
            parsed=parsed,
        )
    if body.get("type") == "message":
        blocks = body["content"]
        text = "".join(b["text"] for b in blocks if b.get("type") == "text")
        uses = [b for b in blocks if b.get("type") == "tool_use"]
        return response_sha256(text=text, tool_calls=_calls(uses, anthropic=True), parsed=parsed)
    response = body["response"]
    calls = [  # the native envelope: tool calls as the gateway keeps them
        {"id": c["id"], "name": c["name"], "arguments": tool_arguments(c["arguments"])}
        for c in response.get("tool_calls", [])
    ]
    return response_sha256(text=response["text"], tool_calls=calls, parsed=parsed)


def _signed_parts(body: Any, *, what: str) -> tuple[Signature, str, dict[str, Any], str]:
    """The signature, job id, provenance (as sent) and recomputed response hash."""
    if not isinstance(body, dict) or not {"provenance", "job_id"} <= body.keys():
        raise ConfigurationError(
            what,
            "is not a signed answer: no `provenance` and `job_id` (an envelope, an "
            "OpenAI chat.completion or an Anthropic message is expected)",
        )
    if body.get("signature") is None:
        raise ConfigurationError(what, "carries no `signature` (was signing off?)")
    try:
        signature = Signature.model_validate(body["signature"])
        response = _response_sha256(body)
    except ValidationError as exc:
        raise ConfigurationError(
            what, f"has a malformed `signature`: {exc.errors()[0]['msg']}"
        ) from None
    except (KeyError, IndexError, TypeError, AttributeError) as exc:
        raise ConfigurationError(what, f"has a malformed response (at {exc!s})") from None
    if not isinstance(body["provenance"], dict) or not isinstance(body["job_id"], str):
        raise ConfigurationError(what, "has a malformed `provenance` or `job_id`")
    return signature, body["job_id"], body["provenance"], response


def verify(
    envelope: Annotated[
        Path, typer.Argument(help="A saved answer: envelope, chat.completion or message (JSON).")
    ],
    keys: Annotated[
        str | None,
        typer.Option(
            "--keys",
            metavar="FILE|URL",
            help="The public keys (as GET /v1/provenance/keys answers); default: this "
            "installation's signing keys.",
        ),
    ] = None,
) -> None:
    """Verify a signed answer offline: exit 0 valid, 1 it does not verify, 2 bad input."""
    what = str(envelope)
    signature, job_id, provenance, response = _signed_parts(_read(envelope, what=what), what=what)
    ring = _keys_from(keys) if keys is not None else local_keys(get_settings())
    try:
        ring.verify(signature=signature, job_id=job_id, provenance=provenance, response=response)
    except VerificationFailed as exc:
        typer.echo(f"invalid: {exc}", err=True)
        raise typer.Exit(code=1) from None
    typer.echo(f"valid: signed by {signature.kid} at {signature.signed_at}")
