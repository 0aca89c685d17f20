"""PromptAssembler: every call's messages come from three append-only sources, in this order.

1. task instructions — the rendered pattern (system text, example messages) and the user text;
2. adapter instructions — text registered per (provider interface, task), built from an
   InstructionContext (e.g. the JSON schema for a provider without native structured output);
3. user instructions — per task from configuration, then per request.

Task builders know nothing of adapters, adapters nothing of user overrides; a model without a
system prompt gets the system text folded into its first user message.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from app.routing.capabilities import Capabilities
from app.schemas import Message, RenderedPrompt, ResponseFormat, TextPart, ToolSet

ANY = "*"


@dataclass(frozen=True, slots=True)
class TaskInstructions:
    """Section 1: what the pattern rendered, the caller's user text (None: no user message of
    its own) and the turns after it, with the tools and output format offered."""

    task: str
    system: str
    examples: tuple[Message, ...]
    user: str | None
    continuation: tuple[Message, ...] = ()
    tools: ToolSet | None = None
    response_format: ResponseFormat | None = None


@dataclass(frozen=True, slots=True)
class InstructionContext:
    """What an adapter-instruction factory may look at."""

    provider: str
    task: str
    capabilities: Capabilities
    output_schema: Mapping[str, Any] | None = None
    native_structured_output: bool = False


AdapterInstructionFactory = Callable[[InstructionContext], str | None]


@dataclass
class AdapterInstructionRegistry:
    """Factories registered per (provider interface, task); `*` matches any."""

    _factories: list[tuple[str, str, AdapterInstructionFactory]] = field(default_factory=list)

    def register(self, provider: str, task: str, factory: AdapterInstructionFactory) -> None:
        self._factories.append((provider, task, factory))

    def instructions(self, context: InstructionContext) -> list[str]:
        found = []
        for provider, task, factory in self._factories:
            if provider in (ANY, context.provider) and task in (ANY, context.task):
                text = (factory(context) or "").strip()
                if text:
                    found.append(text)
        return found


def structured_output_instructions(context: InstructionContext) -> str | None:
    """The schema in words for providers without native support; a short directive otherwise."""
    if context.output_schema is None:
        return None
    if context.native_structured_output:
        return "Return the result as a JSON value matching the provided schema."
    schema = json.dumps(context.output_schema, sort_keys=True, indent=2, ensure_ascii=False)
    return (
        "Respond with one JSON value that conforms to the JSON Schema below, and nothing else: "
        "no prose, no Markdown code fences.\nJSON Schema:\n" + schema
    )


def default_registry() -> AdapterInstructionRegistry:
    registry = AdapterInstructionRegistry()
    registry.register(ANY, ANY, structured_output_instructions)
    return registry


class PromptAssembler:
    """The single entry point that turns the three sections into what a provider receives."""

    def __init__(
        self,
        registry: AdapterInstructionRegistry,
        task_instructions: Mapping[str, str] | None = None,
    ) -> None:
        self.registry = registry
        self.task_instructions = dict(task_instructions or {})

    def _user_sections(self, task: str, request_instructions: str | None) -> list[str]:
        configured = self.task_instructions.get(task)
        texts = (configured, request_instructions)
        return [text.strip() for text in texts if text and text.strip()]

    def assemble_text(
        self,
        task: TaskInstructions,
        context: InstructionContext,
        request_instructions: str | None = None,
    ) -> tuple[str, str | None]:
        """(system, user): the task's system text with the other sections appended."""
        sections = [task.system.strip()] if task.system.strip() else []
        sections += self.registry.instructions(context)
        sections += self._user_sections(task.task, request_instructions)
        return "\n\n".join(sections), task.user

    def assemble(
        self,
        task: TaskInstructions,
        context: InstructionContext,
        request_instructions: str | None = None,
    ) -> RenderedPrompt:
        system, user = self.assemble_text(task, context, request_instructions)
        final = [Message(role="user", content=user)] if user is not None else []
        messages = [*task.examples, *final, *task.continuation]
        offered = {"tools": task.tools, "response_format": task.response_format}
        if not context.capabilities.supports_system_prompt and (
            system or any(message.role == "system" for message in messages)
        ):
            return RenderedPrompt(
                system="", messages=_fold(system, messages), system_folded=True, **offered
            )
        return RenderedPrompt(system=system, messages=messages, **offered)


def _fold(system: str, messages: Sequence[Message]) -> list[Message]:
    """For a model without a system prompt: the system text and every system turn go at the top
    of the next user message (a system turn with no user message after it becomes one)."""
    folded: list[Message] = []
    pending = [system] if system else []
    for message in messages:
        if message.role == "system":
            pending.append(message.text)
            continue
        if pending and message.role == "user":
            message = _prefixed(message, "\n\n".join(pending))
            pending = []
        folded.append(message)
    if pending:
        folded.append(Message(role="user", content="\n\n".join(pending)))
    return folded


def _prefixed(message: Message, text: str) -> Message:
    """`message` with `text` before its own content (a part list keeps its parts)."""
    if isinstance(message.content, str):
        return message.with_text(f"{text}\n\n{message.content}")
    return message.model_copy(update={"content": [TextPart(text=text), *message.content]})
