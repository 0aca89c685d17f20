"""The chainer: links finished records into the audit chain in the background, about once a
second, and signs the head now and then. Every replica runs one (app/store/chain.py says why
they never fork the chain); requests never wait for it.

The tamper window: a record is unprotected between finishing and being linked (one interval).
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
from collections.abc import Mapping
from typing import Any

import structlog

from app.audit.chain import ChainVerifier
from app.config import Settings
from app.errors import GenAIError
from app.store.chain import ChainRepository, Checkpoint, CheckpointPolicy
from app.tracking.signing import Signer

log = structlog.get_logger(__name__)


class Chainer:
    def __init__(
        self,
        chain: ChainRepository,
        *,
        signer: Signer | None,
        every_seconds: float,
        batch: int,
        policy: CheckpointPolicy,
    ) -> None:
        self._chain = chain
        self._signer = signer
        self._every = every_seconds
        self._batch = batch
        self._policy = policy
        self._stop = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    async def run_once(self, *, wait: bool = False) -> int:
        """Link everything unlinked now, a batch per transaction; the entries added."""
        total = 0
        while True:
            appended = await self._chain.append(
                limit=self._batch, policy=self._policy, signer=self._signer, wait=wait
            )
            total += appended.entries
            if appended.checkpoint is not None:
                log.info("audit_checkpoint", seq=appended.checkpoint.seq, reason="periodic")
            if appended.skipped or appended.entries < self._batch:
                return total

    async def checkpoint(self, reason: str, detail: Mapping[str, Any] | None = None) -> Checkpoint:
        """On demand (before a prune: detail {"pruned_before": ISO time}; at shutdown)."""
        checkpoint = await self._chain.checkpoint(reason, detail or {}, self._signer)
        log.info("audit_checkpoint", seq=checkpoint.seq, reason=reason)
        return checkpoint

    async def before_prune(self, cutoff: dt.datetime) -> None:
        """Retention's proof (ProofKeeper, app/store/retention.py): every finished record
        linked, then the head signed with the cut-off, so that verify reports the records a
        prune removes as pruned, not deleted. Raises when it cannot: then nothing is pruned."""
        await self.run_once(wait=True)
        await self.checkpoint("prune", {"pruned_before": cutoff.isoformat()})

    async def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                await self.run_once()
            except GenAIError as exc:  # the store is down: the records wait for the next round
                log.warning("audit_chain_not_extended", error_type=exc.error_type)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stop.wait(), self._every)

    def start(self) -> None:
        self._task = asyncio.create_task(self._loop(), name="audit-chainer")

    async def stop(self) -> None:
        """Between two steps, never inside one."""
        if self._task is not None:
            self._stop.set()
            await self._task
            self._task = None

    async def finish(self) -> None:
        """At shutdown, after the audit writer drained: link the last records, sign the head."""
        try:
            await self.run_once(wait=True)
            await self.checkpoint("shutdown")
        except GenAIError as exc:  # the next start links them; the tail waits unsigned
            log.warning("audit_chain_not_finished", error_type=exc.error_type)


def chainer_from_settings(
    settings: Settings, chain: ChainRepository, signer: Signer | None
) -> Chainer | None:
    """None with GENAI_AUDIT__CHAIN_ENABLED=false."""
    audit = settings.audit
    if not audit.chain_enabled:
        return None
    policy = CheckpointPolicy(
        every_entries=audit.checkpoint_every, every_seconds=audit.checkpoint_seconds
    )
    return Chainer(
        chain,
        signer=signer,
        every_seconds=audit.chain_seconds,
        batch=audit.chain_batch,
        policy=policy,
    )


def verifier_from_settings(
    settings: Settings, chain: ChainRepository, signer: Signer | None
) -> ChainVerifier | None:
    """Checkpoints verify against the signing keys (current and rotated-out); with signing
    off there are none, and unsigned checkpoints are all there is. None with the chain off:
    every record would look inserted behind the service's back."""
    if not settings.audit.chain_enabled:
        return None
    return ChainVerifier(
        chain,
        ring=signer.ring if signer is not None else None,
        unchained_grace_seconds=settings.audit.unchained_grace_seconds,
    )
