"""SourceResolver: the pattern file, database template, fallback or built-in chat, rendered.

Every render runs on the bounded TemplateRenderer: a compiled pattern that renders quickly over
small inputs on the loop within a short slice, anything else in a render thread. Template versions
come through the small `TemplateVersions` protocol, so the catalog does not depend on the store.
"""

from __future__ import annotations

import functools
import uuid
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Protocol

import structlog

from app.catalog.canary import choose_version
from app.catalog.catalog import PatternCatalog
from app.catalog.chat import CHAT_SOURCE, chat_source
from app.catalog.renderer import TemplateRenderer, small_inputs
from app.catalog.source import DATABASE_BASE_PATH, RenderedSource
from app.catalog.templates import FALLBACK_SHA256, render_fallback, render_template_version
from app.errors import LabelNotFound
from app.observability.facts import request_facts
from app.schemas import PRODUCTION, RenderRequest, TemplateLabelInfo, TemplateRef, TemplateVersion

log = structlog.get_logger(__name__)


class TemplateVersions(Protocol):
    """What resolution needs from the template registry (`app.store.templates` provides it)."""

    def get(self, name: str, role: str, version: int) -> Awaitable[TemplateVersion]: ...


class TemplateLabelLookup(Protocol):
    """Where a label points (`app.store.labels` provides it); None: no such label."""

    def get(self, name: str, role: str, label: str) -> Awaitable[TemplateLabelInfo | None]: ...


class SourceResolver:
    """Turns a request's source (pattern key or template reference) into a RenderedSource."""

    def __init__(
        self,
        *,
        patterns: PatternCatalog,
        templates: TemplateVersions,
        labels: TemplateLabelLookup,
        renderer: TemplateRenderer,
        on_fallback: Callable[[str], None] = lambda role: None,
    ) -> None:
        self._patterns = patterns
        self._templates = templates
        self._labels = labels
        self._renderer = renderer
        self._on_fallback = on_fallback  # counts fallbacks per role (a metric), told the role

    def with_templates(self, templates: TemplateVersions) -> SourceResolver:
        """The same resolver reading template versions from `templates` (a release gate
        renders a version that is not stored yet)."""
        return SourceResolver(
            patterns=self._patterns,
            templates=templates,
            labels=self._labels,
            renderer=self._renderer,
            on_fallback=self._on_fallback,
        )

    async def resolve(self, request: RenderRequest) -> RenderedSource:
        if request.pattern_key == CHAT_SOURCE:  # built in, so answered before any pattern file
            return chat_source(request.variables, request.user_prompt)
        if request.pattern_key is not None:
            return await self.pattern(request.pattern_key, request.variables, request.user_prompt)
        assert request.template is not None  # RenderRequest guarantees exactly one source
        return await self.template(
            request.template, request.variables, request.user_prompt, label=request.label
        )

    async def pattern(
        self, name: str, variables: Mapping[str, Any], user_prompt: str
    ) -> RenderedSource:
        """A pattern file; with a `user_template` its last block is the user message."""
        render = functools.partial(
            self._patterns.apply_template, name, variables, user_prompt=user_prompt
        )
        quick = self._patterns.renders_quickly(name) and small_inputs(variables, user_prompt)
        rendered = await self._renderer.run(name, render, quick=quick)
        pattern, meta = rendered.pattern, rendered.pattern.meta
        examples, user = rendered.messages, user_prompt
        if meta.user_template:
            examples, user = rendered.messages[:-1], rendered.messages[-1].text
        return RenderedSource(
            kind="pattern",
            name=pattern.name,
            base_path=pattern.base_path,
            content_hash=pattern.content_hash,
            system=rendered.system,
            variables=rendered.variables,
            user=user,
            examples=examples,
            output_schema=pattern.output_schema,
            requires=tuple(meta.requires),
            snippet_labels=tuple(meta.snippets),
            model_hint=meta.model_hint,
            tags=tuple(meta.tags),
            fallbacks=tuple(meta.fallbacks),
            cache=meta.cache,
            prompt_cache=meta.prompt_cache,
            params=meta.params,
            tools=meta.toolset,
        )

    async def template(
        self,
        ref: TemplateRef,
        variables: Mapping[str, Any],
        user_prompt: str,
        *,
        label: str | None = None,
    ) -> RenderedSource:
        """A pinned version, or the one its label picks (`ref.label`, else `label`, else
        `production`); the fallback prompt when there is no `production` label."""
        version: TemplateVersion | None = None
        chosen_by: str | None = None
        if ref.version is not None:
            version = await self._templates.get(ref.name, ref.role, ref.version)
        else:
            chosen_by = ref.label or label or PRODUCTION
            info = await self._labels.get(ref.name, ref.role, chosen_by)
            if info is None and chosen_by != PRODUCTION:
                raise LabelNotFound(
                    f"Template {ref.name!r}/{ref.role!r} has no label {chosen_by!r}; "
                    f"GET /v1/templates/{ref.name}/{ref.role}/labels lists them."
                )
            if info is not None:
                request_id = request_facts().request_id or uuid.uuid4().hex
                number = choose_version(info, request_id)
                version = await self._templates.get(ref.name, ref.role, number)
        if version is None:
            self._on_fallback(ref.role)
            log.info("template_fallback", template=ref.name, role=ref.role)
            return RenderedSource(
                kind="fallback",
                name=ref.name,
                base_path=DATABASE_BASE_PATH,
                content_hash=FALLBACK_SHA256,
                system=await self._renderer.run(
                    ref.name, functools.partial(render_fallback, ref.role, variables)
                ),
                variables=dict(variables),
                user=user_prompt,
                role=ref.role,
            )
        return RenderedSource(
            kind="template",
            name=version.name,
            base_path=DATABASE_BASE_PATH,
            content_hash=version.checksum,
            system=await self._renderer.run(
                version.name, functools.partial(render_template_version, version, variables)
            ),
            variables=dict(variables),
            user=user_prompt,
            template_id=version.id,
            role=version.role,
            version=version.version,
            label=chosen_by,
        )
