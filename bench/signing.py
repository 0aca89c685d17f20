"""What signing adds to an answer: µs per envelope to sign (inline on the hot path, in
`Outcomes.signed`) and to verify, for the envelope `bench.envelope_serialisation` uses (a
1,500-character system prompt, a 400-character answer) and for one with tool calls and parsed
output. In-process: signing is a pure function, so sockets would only add noise.

    .venv/bin/python -m bench.signing --n 5000

The hot path's overhead goal is +0.5 ms per request in all (bench/RESULTS.md): signing must
take a small part of that to run inline rather than off the request path.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from app.schemas import CompletionEnvelope
from app.tracking.signing import Signer, envelope_response_sha256

from .envelope_serialisation import envelope


def _with_tools(plain: CompletionEnvelope) -> CompletionEnvelope:
    calls = [
        {"id": f"call_{i}", "name": "lookup", "arguments": '{"account": "RF-2", "page": 3}'}
        for i in range(3)
    ]
    response = {**plain.response.model_dump(), "tool_calls": calls}
    parsed = {"answer": "yes", "policy": "RF-2", "confidence": 0.92, "citations": [1, 4, 7]}
    return CompletionEnvelope.model_validate(
        {**plain.model_dump(), "response": response, "parsed": parsed}
    )


def _time(work: Callable[[], object], n: int) -> list[float]:
    """µs per call, five rounds of n."""
    rounds = []
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(n):
            work()
        rounds.append((time.perf_counter() - start) / n * 1e6)
    return rounds


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--n", type=int, default=5000, help="calls per round (5 rounds)")
    n = parser.parse_args().n
    signer = Signer(Ed25519PrivateKey.generate())
    print(f"n={n} (5 rounds; µs per envelope)")
    print(f"{'step':44} {'best':>8} {'median':>8}")
    key, claims = Ed25519PrivateKey.generate(), b"x" * 1024
    rounds = _time(lambda: key.sign(claims), n)
    print(f"{'Ed25519 sign alone (1 KB)':44} {min(rounds):8.1f} {statistics.median(rounds):8.1f}")
    for label, value in (("plain", envelope()), ("tools+parsed", _with_tools(envelope()))):
        signed = signer.signed(value)
        steps: list[tuple[str, Callable[[], object]]] = [
            ("response_sha256", lambda v=value: envelope_response_sha256(v)),  # type: ignore[misc]
            ("sign (claims + Ed25519 + copy)", lambda v=value: signer.signed(v)),  # type: ignore[misc]
            ("verify", lambda s=signed: signer.verify(s)),  # type: ignore[misc]
        ]
        for step, work in steps:
            rounds = _time(work, n)
            name = f"{label}: {step}"
            print(f"{name:44} {min(rounds):8.1f} {statistics.median(rounds):8.1f}")


if __name__ == "__main__":
    main()
