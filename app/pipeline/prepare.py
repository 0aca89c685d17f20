"""PromptPreparer: resolve → compose snippets → choose a capable model → assemble → provenance.

Everything a completion does before it records and calls, and all a replay needs to rebuild a
historical prompt; both use this one component, so they cannot disagree.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

from app.catalog.resolver import SourceResolver, TemplateVersions
from app.catalog.source import RenderedSource
from app.concurrency.offload import off_loop
from app.errors import InvalidConversation, MissingSnippets, Shortfall
from app.prompts.assembler import InstructionContext, PromptAssembler, TaskInstructions
from app.providers.base import ProviderDescriptor
from app.routing.capabilities import (
    CHARS_PER_TOKEN,
    Capabilities,
    CapabilityCatalog,
    Requirement,
)
from app.routing.policy import ModelSelectionPolicy
from app.schemas import (
    ImagePart,
    Message,
    ModelChoice,
    ModelParams,
    Provenance,
    RenderedPrompt,
    RenderRequest,
    RenderResult,
)
from app.schemas.conversation import conversation_problems, is_data_image
from app.snippets import ComposedSnippets, SnippetLibrary
from app.tracking import RenderedFrom, build_provenance


@dataclass(frozen=True, slots=True)
class Prepared:
    """A request made ready to send: what was rendered, for which model, and its fingerprints."""

    request: RenderRequest
    source: RenderedSource
    snippets: ComposedSnippets
    prompt: RenderedPrompt
    choice: ModelChoice
    params: ModelParams
    provenance: Provenance
    native_schema: bool  # the provider enforces `source.output_schema` itself
    output_via: Literal["format", "tool"] = "format"  # how, when it does (capabilities file)
    # A forced tool choice the provider cannot enforce (no `tool_choice`): the repair loop does.
    choice_by_repair: bool = False

    def as_render_result(self) -> RenderResult:
        """The dry-run answer (POST /v1/render, `genai render`)."""
        return RenderResult(
            prompt=self.prompt,
            params=self.params,
            model_choice=self.choice,
            provenance=self.provenance,
        )


def _check_turns(source: RenderedSource, request: RenderRequest) -> None:
    """The caller's turns (a built-in chat's, a continuation) must fit together: the doors check
    them too, with their own field names; this holds for /v1/completions and replays alike."""
    turns = [*source.examples, *request.continuation]
    for found in conversation_problems(turns):
        before = len(source.examples)
        where = (
            f"variables.messages[{found.index}]"
            if found.index < before
            else f"continuation[{found.index - before}]"
        )
        raise InvalidConversation(f"{where}.{found.where}: {found.problem}", param=where)


def _native_output(source: RenderedSource, capabilities: Capabilities) -> bool:
    """Whether the provider enforces the output format itself; else instructions and the repair
    loop do. A forced output tool would leave the caller's own tools uncallable, so not then."""
    wanted = source.response_format
    if not capabilities.supports_structured_output:
        return False
    if (
        wanted is not None
        and wanted.type == "json_object"
        and not capabilities.supports_json_object
    ):
        return False
    return not (source.tools is not None and capabilities.structured_output_via == "tool")


def _forced(source: RenderedSource) -> bool:
    """The tools offered must be used: `required`, or a named tool."""
    choice = source.tools.choice if source.tools is not None else None
    return choice is not None and choice.type in ("required", "tool")


def _requirements(source: RenderedSource, turns: Sequence[Message]) -> tuple[Requirement, ...]:
    """What the model must be able to do: the pattern's `requires`, tools when tools are
    offered, images when a turn holds one."""
    needs = list(source.requires)
    if source.tools is not None:
        needs.append("tools")
    if any(isinstance(part, ImagePart) for turn in turns for part in turn.parts):
        needs.append("images")
    return tuple(dict.fromkeys(needs))


def _prompt_chars(
    request: RenderRequest, source: RenderedSource, snippets: ComposedSnippets
) -> int:
    """The prompt's length in characters, for the capability check's token estimate."""
    turns = (*source.examples, *request.continuation)
    system = _system_text(source, snippets)
    return len(system) + len(source.user or "") + sum(len(m.text) for m in turns)


def _system_text(source: RenderedSource, snippets: ComposedSnippets) -> str:
    return "\n\n".join(part for part in (snippets.text, source.system) if part)


@dataclass(frozen=True, slots=True)
class ModelRules:
    """What decides a request's model and its parameters: the selection policy, what each model
    can do, what each provider accepts, the default parameters and the fallback chains."""

    policy: ModelSelectionPolicy
    capabilities: CapabilityCatalog
    describe: Callable[[str], ProviderDescriptor]  # per provider, known even when unconfigured
    default_params: ModelParams
    fallback_chains: Mapping[str, Sequence[str]] = field(default_factory=dict)


class PromptPreparer:
    def __init__(
        self,
        *,
        resolver: SourceResolver,
        snippets: SnippetLibrary,
        assembler: PromptAssembler,
        models: ModelRules,
    ) -> None:
        self._resolver = resolver
        self._snippets = snippets
        self._assembler = assembler
        self._policy = models.policy
        self._capabilities = models.capabilities
        self._describe = models.describe
        self._default_params = models.default_params
        self._fallback_chains = dict(models.fallback_chains)  # a task or a model → its chain

    def with_templates(self, templates: TemplateVersions) -> PromptPreparer:
        """The same preparer reading template versions from `templates` (see the resolver)."""
        twin = copy.copy(self)
        twin._resolver = self._resolver.with_templates(templates)
        return twin

    async def prepare(
        self, request: RenderRequest, *, snippet_versions: Mapping[str, int] | None = None
    ) -> Prepared:
        """`snippet_versions` (replay) pins database snippets to the versions a job used."""
        source = await self._resolver.resolve(request)
        _check_turns(source, request)
        snippets = await self._compose(request, source, snippet_versions)
        first = self._policy.choose_model(request.model, tasks=source.tasks, hint=source.model_hint)
        choice = self._policy.choose_capable(first, self._shortfalls(request, source, snippets))
        return await off_loop(lambda: self._for_choice(request, source, snippets, choice))

    async def retarget(self, prepared: Prepared, model: str, reason: str) -> Prepared | None:
        """The same request assembled for a fallback model; None when that model lacks a
        capability the request needs (it is skipped, never sent a prompt it cannot serve)."""
        choice = self._policy.choice(model, "fallback", reason)  # endpoints are known to it
        request, source, snippets = prepared.request, prepared.source, prepared.snippets
        if self._shortfalls(request, source, snippets)(choice):
            return None
        return await off_loop(lambda: self._for_choice(request, source, snippets, choice))

    def fallback_chain(self, prepared: Prepared) -> tuple[str, ...]:
        """The models to try after the chosen one: the pattern's own chain, else the config's
        chain for its first task (name, then tags) that has one, else for the chosen model."""
        source = prepared.source
        chain: Sequence[str] = source.fallbacks
        if not chain:
            for key in (*source.tasks, prepared.choice.model):
                if key in self._fallback_chains:
                    chain = self._fallback_chains[key]
                    break
        return tuple(model for model in chain if model != prepared.choice.model)

    def _shortfalls(
        self, request: RenderRequest, source: RenderedSource, snippets: ComposedSnippets
    ) -> Callable[[ModelChoice], list[Shortfall]]:
        turns = (*source.examples, *request.continuation)
        prompt_chars = _prompt_chars(request, source, snippets)
        requires = _requirements(source, turns)

        wanted = ModelParams.effective(self._default_params, source.params, request.params)
        image_urls = any(
            isinstance(part, ImagePart) and not is_data_image(part.url)
            for turn in turns
            for part in turn.parts
        )

        def shortfalls(choice: ModelChoice) -> list[Shortfall]:
            found = self._capabilities.shortfalls(
                choice.provider,
                choice.name,
                requires=requires,
                max_tokens=self._params_for(choice, source, request, prompt_chars).max_tokens or 0,
                prompt_chars=prompt_chars,
                image_urls=image_urls,
            )
            refused = self._describe(choice.provider).refused_params(wanted)
            found += [
                Shortfall(
                    f"{choice.provider} does not take the `{name}` parameter",
                    kind="param",
                    param=name,
                )
                for name in refused
            ]
            return found

        return shortfalls

    def _for_choice(
        self,
        request: RenderRequest,
        source: RenderedSource,
        snippets: ComposedSnippets,
        choice: ModelChoice,
    ) -> Prepared:
        """Everything that depends on the model: assembly, params and provenance."""
        task = TaskInstructions(
            task=source.name,
            system=_system_text(source, snippets),
            examples=source.examples,
            user=source.user,
            continuation=tuple(request.continuation),
            tools=source.tools,
            response_format=source.response_format,
        )
        capabilities = self._capabilities.for_model(choice.provider, choice.name)
        native = source.output_schema is not None and _native_output(source, capabilities)
        context = InstructionContext(
            provider=choice.provider,
            task=source.name,
            capabilities=capabilities,
            output_schema=source.output_schema,
            native_structured_output=native,
        )
        provenance = build_provenance(
            RenderedFrom(
                source.provenance_name,
                source.base_path,
                source.content_hash,
                source.variables,
                label=source.label,
            ),
            user_prompt=request.user_prompt,
            provider=choice.provider,
            model=choice.name,
            snippet_ids=snippets.ids,
            snippet_versions=snippets.used,
            continuation=request.continuation,
        )
        return Prepared(
            request=request,
            source=source,
            snippets=snippets,
            prompt=self._assembler.assemble(task, context, request.instructions),
            choice=choice,
            params=self._params_for(
                choice, source, request, _prompt_chars(request, source, snippets)
            ),
            provenance=provenance,
            native_schema=native,
            output_via=capabilities.structured_output_via,
            choice_by_repair=_forced(source) and not capabilities.supports_tool_choice,
        )

    async def _compose(
        self,
        request: RenderRequest,
        source: RenderedSource,
        pinned: Mapping[str, int] | None = None,
    ) -> ComposedSnippets:
        """The request's snippets; every label the source declares must be among them."""
        missing = [label for label in source.snippet_labels if label not in request.snippets]
        if missing:
            raise MissingSnippets(source.name, missing)
        if not request.snippets:
            return ComposedSnippets(text="", ids=[])
        return await self._snippets.compose(request.snippets, pinned=pinned)

    def _params_for(
        self,
        choice: ModelChoice,
        source: RenderedSource,
        request: RenderRequest,
        prompt_chars: int,
    ) -> ModelParams:
        """`ModelParams.effective`, minus what the provider refuses; a provider
        that insists on `max_tokens` gets, when nothing set one, the model's output limit within
        what its context window leaves the answer (so a long prompt is not refused for it)."""
        provider = self._describe(choice.provider)
        params = ModelParams.effective(self._default_params, source.params, request.params).only(
            provider.supported_params
        )
        if params.max_tokens is None and provider.requires_max_tokens:
            caps = self._capabilities.for_model(choice.provider, choice.name)
            room = caps.context_tokens - prompt_chars // CHARS_PER_TOKEN
            limit = max(1, min(caps.output_tokens, room))
            params = params.model_copy(update={"max_tokens": limit})
        return params
