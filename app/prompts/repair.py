"""The bounded validate-and-repair loop for structured output, and for a tool choice the
provider cannot force itself (Ollama has no `tool_choice`: `required` or a named tool is held to
by asking again when the model answered without the call).

Each invalid answer is sent back with targeted feedback (`repair_feedback`) until one validates
or the budget is spent. Every finished try is an `Attempt`, kept by the loop even when a later
try fails, so the audit trail records what the model answered whatever the outcome.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from app.errors import StructuredOutputInvalid
from app.prompts.structured import (
    Attempt,
    repair_feedback,
    tool_call_feedback,
    validate_output,
)
from app.providers import ProviderReply
from app.schemas import (
    InvalidValue,
    Message,
    StructuredOutcome,
    ToolChoice,
    Usage,
    ValidationIssues,
)

ModelCall = Callable[[tuple[Message, ...]], Awaitable[ProviderReply]]
"""One provider call (retries included) for the given conversation."""


@dataclass(frozen=True, slots=True)
class Answer:
    """The reply the caller gets (usage summed over every try), parsed when there is a schema."""

    reply: ProviderReply
    parsed: Any | None = None
    outcome: StructuredOutcome | None = None
    attempts: tuple[Attempt, ...] = ()


class RepairLoop:
    """One completion's tries. Without a schema it is a single call and records no attempts."""

    def __init__(
        self,
        *,
        schema: Mapping[str, Any] | None,
        native: bool,
        max_attempts: int,
        provider: str,
        must_call: ToolChoice | None = None,
    ) -> None:
        self.schema = schema
        self.mode: Literal["native", "instructions"] = "native" if native else "instructions"
        self.must_call = must_call  # a forced choice this loop holds the model to
        repairs = schema is not None or must_call is not None
        self.limit = max(1, max_attempts) if repairs else 1
        self.provider = provider
        self._attempts: tuple[Attempt, ...] = ()

    @property
    def attempts(self) -> tuple[Attempt, ...]:
        """Every finished try so far: what the audit records when the call fails or is cancelled."""
        return self._attempts

    def check(self, reply: ProviderReply) -> Answer:
        """One answer checked without repairs (a stream's: it has already reached the caller)."""
        if self.schema is None or reply.tool_calls:
            return Answer(reply)
        validation = validate_output(self.schema, reply.text, reply.payload)
        self._attempts += (Attempt(1, validation.valid, validation.issues, reply.text),)
        outcome = StructuredOutcome(
            valid=validation.valid,
            attempts=1,
            mode=self.mode,
            issues=None if validation.valid else validation.issues,
        )
        parsed = validation.parsed if validation.valid else None
        return Answer(reply, parsed, outcome, self._attempts)

    def _uncalled(self, reply: ProviderReply) -> ValidationIssues | None:
        """What is wrong when the model did not make the call `must_call` asks for."""
        wanted = self.must_call
        if wanted is None:
            return None
        names = [c.name for c in reply.tool_calls]
        if names and (wanted.name is None or wanted.name in names):
            return None
        requirement = f"a call of the tool {wanted.name!r}" if wanted.name else "a tool call"
        problem = "no tool was called" if not names else f"called {', '.join(names)}"
        issue = InvalidValue(
            field="$", provided=reply.text[:200], problem=problem, requirement=requirement
        )
        return ValidationIssues(invalid=[issue])

    async def run(self, call: ModelCall, messages: Sequence[Message]) -> Answer:
        conversation = tuple(messages)
        if self.schema is None and self.must_call is None:
            return Answer(await call(conversation))
        usage = Usage(input_tokens=0, output_tokens=0, total_tokens=0)
        issues = ValidationIssues()
        for number in range(1, self.limit + 1):
            reply = await call(conversation)
            usage = usage.plus(reply.usage)
            issues = self._uncalled(reply) or ValidationIssues()
            if issues.invalid:
                self._attempts += (Attempt(number, False, issues, reply.text),)
                conversation += (
                    Message(role="assistant", content=reply.text),
                    Message(role="user", content=tool_call_feedback(self.must_call, issues)),
                )
                continue
            if reply.tool_calls or self.schema is None:  # a call: there is no output yet
                return Answer(dataclasses.replace(reply, usage=usage))
            validation = validate_output(self.schema, reply.text, reply.payload)
            self._attempts += (Attempt(number, validation.valid, validation.issues, reply.text),)
            if validation.valid:
                outcome = StructuredOutcome(valid=True, attempts=number, mode=self.mode)
                # What the caller pays for: usage summed over every attempt.
                return Answer(
                    dataclasses.replace(reply, usage=usage),
                    validation.parsed,
                    outcome,
                    self._attempts,
                )
            conversation += (
                Message(role="assistant", content=reply.text),
                Message(role="user", content=repair_feedback(validation)),
            )
            issues = validation.issues
        what = "output schema" if self.schema is not None else "tool choice"
        raise StructuredOutputInvalid(
            f"The model's answer did not match the {what} after {self.limit} attempts.",
            provider=self.provider,
            attempts=self.limit,
            issues=issues.model_dump(),
        )
