"""Which version of a split label answers a request: a pure function of the request id.

The bucket is `sha256("{request_id}:{name}:{role}:{label}") mod 100`, so one request id always
gets the same version (a retry, a replay of the same id), and over many ids each version gets its
weight's share. Naming the template and label in the hash keeps two canaries independent.
"""

from __future__ import annotations

import hashlib

from app.schemas import TemplateLabelInfo


def bucket(request_id: str, name: str, role: str, label: str) -> int:
    digest = hashlib.sha256(f"{request_id}:{name}:{role}:{label}".encode()).digest()
    return int.from_bytes(digest, "big") % 100


def choose_version(info: TemplateLabelInfo, request_id: str) -> int:
    """The label's version, or for a split the version whose weight range holds the bucket."""
    if not info.split:
        return info.version
    spot = bucket(request_id, info.name, info.role, info.label)
    floor = 0
    for share in info.split:
        floor += share.weight
        if spot < floor:
            return share.version
    return info.split[-1].version
