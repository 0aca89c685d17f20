"""The public keys that verify signed envelopes: open like `/openapi.json` (no key needed), so
anyone holding an answer can fetch what proves it."""

from __future__ import annotations

from fastapi import APIRouter

from app.api.deps import SignerDep
from app.api.paths import PROVENANCE_KEYS, V1
from app.schemas import SigningKeys

router = APIRouter(prefix=V1, tags=["provenance"])


@router.get(
    PROVENANCE_KEYS,
    operation_id="listSigningKeys",
    summary="The Ed25519 public keys that verify envelope signatures (open: no key needed)",
    response_model=SigningKeys,
)
async def signing_keys(signer: SignerDep) -> SigningKeys:
    """The current key first, then the rotated-out ones; empty when signing is off."""
    return signer.ring.published() if signer is not None else SigningKeys(keys=[])
