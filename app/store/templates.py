"""TemplateRepository: immutable versions, exactly one active variant per (name, role)."""

from __future__ import annotations

from sqlalchemy import func, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from app.errors import TemplateConflict, TemplateNotFound
from app.schemas import TemplateCreate, TemplateVersion
from app.store.db import store_seam
from app.store.tables import PromptTemplate
from app.tracking import template_checksum


def _version(row: PromptTemplate) -> TemplateVersion:
    return TemplateVersion.model_validate(row, from_attributes=True)


class TemplateRepository:
    """Each method that reads or writes is a `store_seam`: storage failures are StoreUnavailable."""

    def __init__(self, sessions: async_sessionmaker[AsyncSession]) -> None:
        self._sessions = sessions

    @store_seam
    async def create_version(self, new: TemplateCreate) -> TemplateVersion:
        """Store the next version; the first version of a (name, role) is always active."""
        try:
            async with self._sessions.begin() as session:
                latest = await session.scalar(
                    select(func.max(PromptTemplate.version)).where(
                        PromptTemplate.name == new.name, PromptTemplate.role == new.role
                    )
                )
                activate = new.activate or latest is None
                if activate:
                    await self._deactivate(session, new.name, new.role)
                row = PromptTemplate(
                    name=new.name,
                    role=new.role,
                    version=(latest or 0) + 1,
                    template=new.template,
                    variables=list(new.variables),
                    active=activate,
                    checksum=template_checksum(new.template),
                    blueprint_schema=new.blueprint_schema,
                    blueprint_instructions=new.blueprint_instructions,
                )
                session.add(row)
                await session.flush()
                return _version(row)
        except IntegrityError:
            raise TemplateConflict(
                f"Another version of {new.name!r}/{new.role!r} was stored at the same time; "
                "send the request again."
            ) from None

    @staticmethod
    async def _deactivate(session: AsyncSession, name: str, role: str) -> None:
        await session.execute(
            update(PromptTemplate)
            .where(PromptTemplate.name == name, PromptTemplate.role == role, PromptTemplate.active)
            .values(active=False)
        )

    @store_seam
    async def activate(self, name: str, role: str, version: int) -> TemplateVersion:
        """Make one version active and every other variant of (name, role) inactive, atomically."""
        try:
            async with self._sessions.begin() as session:
                row = await self._find(session, name, role, version)
                if not row.active:
                    await self._deactivate(session, name, role)
                    await session.flush()
                    row.active = True
                await session.flush()
                return _version(row)
        except IntegrityError:
            raise TemplateConflict(
                f"{name!r}/{role!r} was activated concurrently; send the request again."
            ) from None

    @staticmethod
    async def _find(session: AsyncSession, name: str, role: str, version: int) -> PromptTemplate:
        row = await session.scalar(
            select(PromptTemplate).where(
                PromptTemplate.name == name,
                PromptTemplate.role == role,
                PromptTemplate.version == version,
            )
        )
        if row is None:
            raise TemplateNotFound(f"Template {name!r} has no version {version} for role {role!r}.")
        return row

    @store_seam
    async def get(self, name: str, role: str, version: int) -> TemplateVersion:
        async with self._sessions() as session:
            return _version(await self._find(session, name, role, version))

    @store_seam
    async def get_by_id(self, template_id: int) -> TemplateVersion | None:
        async with self._sessions() as session:
            row = await session.get(PromptTemplate, template_id)
            return _version(row) if row else None

    @store_seam
    async def get_active(self, name: str, role: str) -> TemplateVersion | None:
        async with self._sessions() as session:
            row = await session.scalar(
                select(PromptTemplate).where(
                    PromptTemplate.name == name, PromptTemplate.role == role, PromptTemplate.active
                )
            )
            return _version(row) if row else None

    @store_seam
    async def list_versions(
        self, name: str | None = None, role: str | None = None
    ) -> list[TemplateVersion]:
        query = select(PromptTemplate).order_by(
            PromptTemplate.name, PromptTemplate.role, PromptTemplate.version
        )
        if name is not None:
            query = query.where(PromptTemplate.name == name)
        if role is not None:
            query = query.where(PromptTemplate.role == role)
        async with self._sessions() as session:
            return [_version(row) for row in await session.scalars(query)]
