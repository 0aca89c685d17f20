"""Verifying the audit chain (issue 20): walk the entries in pages and name the first one that
was edited, deleted, inserted or reordered, a tail truncated since a checkpoint, and a
checkpoint whose signature fails. Rows a signed prune removed are counted as pruned, not lost.

Memory stays bounded on any chain: one page of entries and their rows at a time; checkpoints
(one per interval) are read whole.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from app.schemas import ChainProblem, ChainProblemKind, ChainReport
from app.store.chain import ChainRepository, Checkpoint, Entry
from app.tracking.chain import GENESIS, content_sha256, entry_sha256
from app.tracking.signing import KeyRing, VerificationFailed

PAGE = 1000
PRUNE = "prune"


def _problem(
    kind: ChainProblemKind, detail: str, *, seq: int | None = None, ref: str | None = None
) -> ChainProblem:
    return ChainProblem(kind=kind, seq=seq, ref=ref, detail=detail)


def _own_hash(entry: Entry) -> str:
    return entry_sha256(
        seq=entry.seq,
        kind=entry.kind,
        ref=entry.ref,
        record_at=entry.record_at,
        content=entry.content_sha256,
        prev=entry.prev_sha256,
    )


@dataclass(frozen=True, slots=True)
class _Checkpoints:
    """The trusted checkpoints: by seq, and the prune cut-offs they sign."""

    by_seq: dict[int, list[Checkpoint]]
    prunes: list[tuple[int, dt.datetime]]  # (seq covered, pruned_before)
    last: Checkpoint | None
    checked: int
    unsigned: int

    def pruned(self, entry: Entry) -> bool:
        return any(seq >= entry.seq and entry.record_at < cut for seq, cut in self.prunes)


def _check_checkpoints(
    checkpoints: Sequence[Checkpoint], ring: KeyRing | None
) -> _Checkpoints | ChainProblem:
    """Each signature checked; an unsigned checkpoint is trusted only where nothing signs
    (`ring` None), so one written behind the service's back cannot excuse a deleted row."""
    by_seq: dict[int, list[Checkpoint]] = {}
    prunes: list[tuple[int, dt.datetime]] = []
    unsigned = 0
    for checkpoint in checkpoints:
        if checkpoint.signature is None or checkpoint.kid is None:
            unsigned += 1
            if ring is not None:
                continue
        elif ring is not None:
            try:
                ring.verify_bytes(
                    kid=checkpoint.kid, data=checkpoint.claims(), value=checkpoint.signature
                )
            except VerificationFailed as exc:
                kind: ChainProblemKind = (
                    "unknown_key" if checkpoint.kid not in ring.keys else "bad_signature"
                )
                detail = f"checkpoint at seq {checkpoint.seq} ({checkpoint.reason}): {exc}"
                return _problem(kind, detail, seq=checkpoint.seq)
        by_seq.setdefault(checkpoint.seq, []).append(checkpoint)
        cut = checkpoint.detail.get("pruned_before")
        if checkpoint.reason == PRUNE and isinstance(cut, str):
            prunes.append((checkpoint.seq, dt.datetime.fromisoformat(cut)))
    trusted = [c for group in by_seq.values() for c in group]
    last = max(trusted, key=lambda c: c.seq, default=None)
    return _Checkpoints(
        by_seq=by_seq, prunes=prunes, last=last, checked=len(checkpoints), unsigned=unsigned
    )


@dataclass(slots=True)
class _Walk:
    """Where the walk stands: the hash the next entry must link to, and what was counted."""

    expected_seq: int
    head: str
    before_head: str | None = None  # the hash the previous entry linked to
    deferred: ChainProblem | None = None  # reported if nothing more precise turns up
    checked: int = 0
    pruned: int = 0
    problem: ChainProblem | None = field(default=None)


class ChainVerifier:
    """`verify(from_seq, to_seq)` → ChainReport; `max_entries` bounds one call (the route)."""

    def __init__(
        self,
        chain: ChainRepository,
        *,
        ring: KeyRing | None,
        unchained_grace_seconds: float,
        page: int = PAGE,
    ) -> None:
        self._chain = chain
        self._ring = ring
        self._grace = dt.timedelta(seconds=unchained_grace_seconds)
        self._page = page

    @property
    def chain(self) -> ChainRepository:
        """The chain verified, for reads that need no walk (its head, its backlog)."""
        return self._chain

    async def verify(
        self, from_seq: int = 1, to_seq: int | None = None, *, max_entries: int | None = None
    ) -> ChainReport:
        head = await self._chain.head()
        last = head.seq if to_seq is None else min(to_seq, head.seq)
        stop = last if max_entries is None else min(last, from_seq - 1 + max_entries)
        checkpoints = _check_checkpoints(await self._chain.checkpoints(), self._ring)
        walk = _Walk(expected_seq=from_seq, head=await self._link_into(from_seq))
        if isinstance(checkpoints, ChainProblem):
            walk.problem = checkpoints
        else:
            await self._walk(walk, stop, checkpoints)
            walk.problem = walk.problem or walk.deferred
            if walk.problem is None and stop == head.seq:
                walk.problem = await self._after_the_end(head.seq, checkpoints)
        counted = checkpoints if isinstance(checkpoints, _Checkpoints) else None
        return ChainReport(
            ok=walk.problem is None,
            from_seq=from_seq,
            to_seq=walk.expected_seq - 1,
            head_seq=head.seq,
            entries_checked=walk.checked,
            checkpoints_checked=counted.checked if counted else 0,
            unsigned_checkpoints=counted.unsigned if counted else 0,
            pruned=walk.pruned,
            problem=walk.problem,
            next_from=stop + 1 if walk.problem is None and stop < last else None,
        )

    async def _link_into(self, from_seq: int) -> str:
        """The hash entry `from_seq` must link to: its predecessor's (trusted as stored when
        a walk starts mid-chain), or genesis."""
        if from_seq <= 1:
            return GENESIS
        previous = await self._chain.entries(after=from_seq - 2, until=from_seq - 1, limit=1)
        return previous[0].entry_sha256 if previous else GENESIS

    async def _walk(self, walk: _Walk, stop: int, checkpoints: _Checkpoints) -> None:
        while walk.problem is None and walk.expected_seq <= stop:
            page = await self._chain.entries(
                after=walk.expected_seq - 1, until=stop, limit=self._page
            )
            if not page:
                walk.problem = _problem(
                    "deleted", "the chain ends before its head", seq=walk.expected_seq
                )
                return
            walk.problem = await self._check_page(walk, page, checkpoints)

    async def _check_page(
        self, walk: _Walk, page: list[Entry], checkpoints: _Checkpoints
    ) -> ChainProblem | None:
        links = await self._check_links(walk, page, checkpoints)
        if links is not None:
            return links
        return await self._check_records(walk, page, checkpoints)

    async def _check_links(
        self, walk: _Walk, page: list[Entry], checkpoints: _Checkpoints
    ) -> ChainProblem | None:
        start = walk.expected_seq
        seq, head, before = start, walk.head, walk.before_head
        for index, entry in enumerate(page):
            if entry.seq != seq:
                return _problem("deleted", f"entry {seq} is missing from the chain", seq=seq)
            if entry.prev_sha256 != head:
                return await self._broken_link(entry, page[index + 1 :], head, before)
            if _own_hash(entry) != entry.entry_sha256:
                detail = "the entry's fields do not match its own hash"
                return _problem("edited", detail, seq=seq, ref=entry.ref)
            for checkpoint in checkpoints.by_seq.get(seq, []):
                if checkpoint.head_sha256 != entry.entry_sha256:
                    detail = f"the {checkpoint.reason} checkpoint signed another head at {seq}"
                    cut = _problem("truncated", detail, seq=seq, ref=entry.ref)
                    if await self._chain.seq_of(checkpoint.head_sha256) is None:
                        return cut  # the signed head is gone: the tail was rewritten
                    # The signed head moved: entries were added or removed before it; the
                    # links ahead say where, and this stands if they do not.
                    walk.deferred = walk.deferred or cut
            before, head, seq = head, entry.entry_sha256, seq + 1
        return None

    async def _broken_link(
        self, entry: Entry, following: Sequence[Entry], head: str, before: str | None
    ) -> ChainProblem:
        """Entry `entry.seq` does not link to the one before it: say how."""
        seq, ref = entry.seq, entry.ref
        if before is not None and entry.prev_sha256 == before:
            detail = f"entry {seq - 1} is not in the chain that links past it"
            return _problem("inserted", detail, seq=seq - 1)
        found = await self._chain.seq_of(entry.prev_sha256)
        if found is not None and found > seq:
            detail = f"it links to entry {found}, which comes after it"
            return _problem("reordered", detail, seq=seq, ref=ref)
        if following and following[0].prev_sha256 == head:
            return _problem("inserted", "an entry no link points to", seq=seq, ref=ref)
        if found is not None:
            detail = f"it links to entry {found}: the entries between are gone"
            return _problem("deleted", detail, seq=seq, ref=ref)
        return _problem("edited", "it links to no entry of the chain", seq=seq, ref=ref)

    async def _check_records(
        self, walk: _Walk, page: list[Entry], checkpoints: _Checkpoints
    ) -> ChainProblem | None:
        first, last = page[0].seq, page[-1].seq
        by_kind: dict[str, list[Entry]] = {}
        for entry in page:
            by_kind.setdefault(entry.kind, []).append(entry)
        rows: dict[str, Mapping[str, Mapping[str, object]]] = {}
        claims: dict[int, str] = {}
        for kind in self._chain.sources:
            refs = [entry.ref for entry in by_kind.get(kind, [])]
            rows[kind] = await self._chain.records(kind, refs) if refs else {}
            for seq, ref in await self._chain.linked(kind, after=first - 1, until=last):
                if claims.setdefault(seq, f"{kind}:{ref}") != f"{kind}:{ref}":
                    return _problem("inserted", f"two records claim entry {seq}", seq=seq)
        for entry in page:
            claim = claims.get(entry.seq)
            if claim is not None and claim != f"{entry.kind}:{entry.ref}":
                detail = f"record {claim} claims this entry, which links {entry.ref}"
                return _problem("inserted", detail, seq=entry.seq, ref=claim.split(":", 1)[1])
            row = rows.get(entry.kind, {}).get(entry.ref)
            if row is None:
                if checkpoints.pruned(entry):
                    walk.pruned += 1
                    walk.checked += 1
                    continue
                detail = f"the {entry.kind} record is gone"
                return _problem("deleted", detail, seq=entry.seq, ref=entry.ref)
            if content_sha256(row) != entry.content_sha256:
                detail = f"the {entry.kind} record differs from what was chained"
                return _problem("edited", detail, seq=entry.seq, ref=entry.ref)
            walk.checked += 1
        walk.before_head = page[-1].prev_sha256
        walk.head, walk.expected_seq = page[-1].entry_sha256, last + 1
        return None

    async def _after_the_end(self, head_seq: int, checkpoints: _Checkpoints) -> ChainProblem | None:
        """Past the last entry: a checkpoint beyond it (a cut tail), a record never linked."""
        if checkpoints.last is not None and checkpoints.last.seq > head_seq:
            detail = (
                f"the {checkpoints.last.reason} checkpoint covers up to {checkpoints.last.seq}, "
                f"the chain ends at {head_seq}"
            )
            return _problem("truncated", detail, seq=head_seq + 1)
        moment = dt.datetime.now(dt.UTC) - self._grace
        for kind in self._chain.sources:
            ref = await self._chain.unchained_before(kind, moment)
            if ref is not None:
                detail = f"a finished {kind} record older than the grace period was never chained"
                return _problem("inserted", detail, ref=ref)
        return None
