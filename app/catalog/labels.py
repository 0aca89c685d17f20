"""TemplateLabels: the release actions on database templates: store a version, move a label,
delete one, read their history. Routes and the CLI both come here, so they share one set of rules.

A protected label (GENAI_RELEASE__PROTECTED_LABELS, default `production`) only moves to versions
the `ReleaseGate` passes (their pattern tests), and with GENAI_RELEASE__REQUIRE_TESTS only to
versions that carry tests. Every committed action is then announced on the EventSink.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Collection
from typing import Any, Protocol

from app.auth.principal import Principal
from app.errors import InvalidRequest, LabelNotFound, LabelProtected, TestsFailed
from app.schemas import (
    PRODUCTION,
    RESERVED_LABELS,
    FieldProblem,
    LabelMoveIn,
    LabelMoveRecord,
    TemplateCreate,
    TemplateLabelInfo,
    TemplateVersion,
)
from app.store.labels import LabelRepository, Moved, Target
from app.store.templates import TemplateRepository, creation_message
from app.tracking import template_checksum
from app.webhooks import EventSink


class ReleaseGate(Protocol):
    async def failures(self, version: TemplateVersion) -> list[str]:
        """The failing test cases of `version`, one line each; [] when it may be released."""
        ...


def author_of(caller: Principal | None) -> str:
    """Who the history names: the calling key's id, or `anonymous` when auth is disabled."""
    return (caller.key_id if caller is not None else None) or "anonymous"


def _target_json(info: TemplateLabelInfo | None) -> dict[str, Any] | None:
    if info is None:
        return None
    split = [share.model_dump() for share in info.split] if info.split else None
    return {"version": info.version, "split": split}


class TemplateLabels:
    def __init__(
        self,
        *,
        templates: TemplateRepository,
        labels: LabelRepository,
        gate: ReleaseGate,
        events: EventSink,
        protected: Collection[str] = (PRODUCTION,),
        require_tests: bool = False,
    ) -> None:
        self.templates = templates
        self.labels = labels
        self._gate = gate
        self._events = events
        self._protected = frozenset(protected)
        self._require_tests = require_tests

    def is_protected(self, label: str) -> bool:
        return label in self._protected

    async def create_version(self, new: TemplateCreate, *, author: str) -> TemplateVersion:
        """Store the next version (already checked by `check_new_template`); `production`
        moves to it with `activate` or when it is the first, through the gate when protected."""
        latest = await self.templates.latest_version(new.name, new.role)
        if (new.activate or latest is None) and self.is_protected(PRODUCTION):
            now = dt.datetime.now(dt.UTC)
            draft = TemplateVersion(
                id=0,
                name=new.name,
                role=new.role,
                version=(latest or 0) + 1,
                template=new.template,
                variables=list(new.variables),
                checksum=template_checksum(new.template),
                blueprint_schema=new.blueprint_schema,
                blueprint_instructions=new.blueprint_instructions,
                created_at=now,
                updated_at=now,
                tests=list(new.tests),
            )
            await self._check(PRODUCTION, [draft])
        version, moved = await self.templates.create_version(new, author=author)
        await self._events.emit(
            "template.version_created",
            {
                "template": {"name": version.name, "role": version.role},
                "version": version.version,
                "checksum": version.checksum,
                "labels": version.labels,
                "key_id": author,
                "created_at": version.created_at.isoformat(),
            },
        )
        if moved is not None:
            message = creation_message(version.version, new.activate)
            await self._moved(version.name, version.role, PRODUCTION, moved, message, author)
        return version

    async def move(
        self, name: str, role: str, label: str, body: LabelMoveIn, *, author: str
    ) -> TemplateLabelInfo:
        """Point `label` at a version or a split; recorded with `author` and `body.message`."""
        self._require_name(label)
        current = await self.labels.get(name, role, label)
        versions = [await self.templates.get(name, role, v) for v in body.versions]  # 404s
        if self.is_protected(label):
            await self._check(label, versions)
        target = Target(version=body.versions[0], split=tuple(body.split) if body.split else None)
        moved = await self.labels.move(
            name=name,
            role=role,
            label=label,
            target=target,
            message=body.message,
            author=author,
            revision=current.revision if current else None,
        )
        await self._moved(name, role, label, moved, body.message, author)
        assert moved.after is not None
        return moved.after

    async def activate(self, name: str, role: str, version: int, *, author: str) -> TemplateVersion:
        """The deprecated POST …/activate: a move of `production` to `version`."""
        body = LabelMoveIn(version=version, message=f"activate version {version}")
        current = await self.labels.get(name, role, PRODUCTION)
        if current is None or current.split or current.version != version:
            await self.move(name, role, PRODUCTION, body, author=author)
        return await self.templates.get(name, role, version)

    async def delete(self, name: str, role: str, label: str, *, message: str, author: str) -> None:
        if self.is_protected(label):
            raise LabelProtected(
                f"Label {label!r} is protected (GENAI_RELEASE__PROTECTED_LABELS) and cannot be "
                "deleted; move it to another version instead."
            )
        current = await self.labels.get(name, role, label)
        if current is None:
            raise LabelNotFound(f"Template {name!r}/{role!r} has no label {label!r}.")
        moved = await self.labels.move(
            name=name,
            role=role,
            label=label,
            target=None,
            message=message,
            author=author,
            revision=current.revision,
        )
        await self._moved(name, role, label, moved, message, author)

    async def labels_of(self, name: str, role: str) -> list[TemplateLabelInfo]:
        return await self.labels.labels_of(name, role)

    async def history(
        self, name: str, role: str, label: str | None = None
    ) -> list[LabelMoveRecord]:
        return await self.labels.history(name, role, label)

    async def _check(self, label: str, versions: list[TemplateVersion]) -> None:
        failures: list[str] = []
        for version in versions:
            if self._require_tests and not version.tests:
                failures.append(
                    f"v{version.version}: has no tests (GENAI_RELEASE__REQUIRE_TESTS is on)"
                )
            failures += [
                f"v{version.version}: {line}" for line in await self._gate.failures(version)
            ]
        if failures:
            raise TestsFailed(
                f"Label {label!r} is protected and its tests fail: " + "; ".join(failures[:5]),
                failures,
            )

    def _require_name(self, label: str) -> None:
        if label in RESERVED_LABELS:
            raise InvalidRequest(
                [
                    FieldProblem(
                        loc=["path", "label"],
                        msg=f"{label!r} is a reserved name, not a label",
                        type="value_error",
                    )
                ]
            )

    async def _moved(
        self, name: str, role: str, label: str, moved: Moved, message: str, author: str
    ) -> None:
        await self._events.emit(
            "label.moved",
            {
                "template": {"name": name, "role": role},
                "label": label,
                "from": _target_json(moved.before),
                "to": _target_json(moved.after),
                "message": message,
                "key_id": author,
                "moved_at": moved.moved_at.isoformat(),
            },
        )
