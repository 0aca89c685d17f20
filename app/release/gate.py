"""The release gate: a template version may take a protected label only when its own test
cases pass, rendered exactly as a request for that version would be (a dry run: no provider).

A version being created is checked before it is stored, so the gate renders it from memory:
the preparer reads that one version from an overlay and every other from the registry.
"""

from __future__ import annotations

from app.catalog.resolver import TemplateVersions
from app.pipeline.prepare import PromptPreparer
from app.release.report import SuiteReport
from app.release.suite import run_pattern_suite
from app.schemas import RenderRequest, RenderResult, TemplateRef, TemplateVersion


def version_ref(version: TemplateVersion) -> TemplateRef:
    """A reference pinned to exactly this version (labels play no part in a test)."""
    return TemplateRef(name=version.name, role=version.role, version=version.version)


def suite_name(version: TemplateVersion) -> str:
    return f"{version.name}/{version.role}@v{version.version}"


class _Overlay:
    """The registry, with `version` answered from memory."""

    def __init__(self, templates: TemplateVersions, version: TemplateVersion) -> None:
        self._templates = templates
        self._version = version

    async def get(self, name: str, role: str, version: int) -> TemplateVersion:
        own = self._version
        if (name, role, version) == (own.name, own.role, own.version):
            return own
        return await self._templates.get(name, role, version)


class PatternTestGate:
    """`failures(version)`: the failing cases of the version's tests, one line each."""

    def __init__(self, *, preparer: PromptPreparer, templates: TemplateVersions) -> None:
        self._preparer = preparer
        self._templates = templates

    async def run(self, version: TemplateVersion) -> SuiteReport:
        """The version's cases, non-live."""
        preparer = self._preparer.with_templates(_Overlay(self._templates, version))

        async def render(request: RenderRequest) -> RenderResult:
            return (await preparer.prepare(request)).as_render_result()

        return await run_pattern_suite(
            suite_name(version), list(version.tests), render=render, template=version_ref(version)
        )

    async def failures(self, version: TemplateVersion) -> list[str]:
        if not version.tests:
            return []
        return (await self.run(version)).failure_messages()
