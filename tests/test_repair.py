"""The structured-output repair loop (app.prompts.repair): typed attempts, bounded tries."""

from __future__ import annotations

import json

import pytest

from app.errors import StructuredOutputInvalid, UpstreamError
from app.prompts.repair import RepairLoop
from app.prompts.structured import Attempt
from app.providers import ProviderReply
from app.schemas import Message, Usage

SCHEMA = {
    "type": "object",
    "required": ["answer"],
    "additionalProperties": False,
    "properties": {"answer": {"type": "string"}},
}
QUESTION = (Message(role="user", content="What is the answer?"),)


def reply(text: str, tokens: int = 10) -> ProviderReply:
    return ProviderReply(
        text=text,
        finish_reason="stop",
        usage=Usage(input_tokens=tokens, output_tokens=1, total_tokens=tokens + 1),
    )


class ScriptedModel:
    """Answers from a script, one entry per call (an exception is raised), noting each input."""

    def __init__(self, *script: ProviderReply | Exception) -> None:
        self.script = list(script)
        self.conversations: list[tuple[Message, ...]] = []

    async def __call__(self, messages: tuple[Message, ...]) -> ProviderReply:
        self.conversations.append(messages)
        step = self.script.pop(0)
        if isinstance(step, Exception):
            raise step
        return step


def loop(max_attempts: int = 3, *, schema: dict[str, object] | None = SCHEMA) -> RepairLoop:
    return RepairLoop(schema=schema, native=False, max_attempts=max_attempts, provider="openai")


async def test_without_a_schema_one_call_is_made_and_no_attempt_recorded() -> None:
    model = ScriptedModel(reply("plain text"))
    answer = await loop(schema=None).run(model, QUESTION)
    assert answer.reply.text == "plain text"
    assert (answer.parsed, answer.outcome, answer.attempts) == (None, None, ())
    assert model.conversations == [QUESTION]


async def test_a_valid_first_answer_is_parsed_with_one_typed_attempt() -> None:
    model = ScriptedModel(reply('{"answer": "42"}'))
    answer = await loop().run(model, QUESTION)
    assert answer.parsed == {"answer": "42"}
    assert answer.outcome is not None and answer.outcome.attempts == 1
    assert answer.outcome.mode == "instructions"
    assert [type(a) for a in answer.attempts] == [Attempt]
    assert answer.attempts[0].number == 1 and answer.attempts[0].valid


async def test_an_invalid_answer_is_repaired_and_every_try_is_an_attempt() -> None:
    model = ScriptedModel(reply('{"answer": 42}', tokens=10), reply('{"answer": "42"}', tokens=20))
    answer = await loop().run(model, QUESTION)
    assert [(a.number, a.valid) for a in answer.attempts] == [(1, False), (2, True)]
    assert answer.attempts[0].issues.invalid[0].field == "answer"
    assert answer.attempts[0].response == '{"answer": 42}'
    # The second call carries the first answer and the targeted feedback, after the question.
    second = model.conversations[1]
    assert second[: len(QUESTION)] == QUESTION
    assert second[-2] == Message(role="assistant", content='{"answer": 42}')
    assert json.loads(second[-1].text)["result"] == "validation_failed"
    # The caller pays for both tries.
    assert answer.reply.usage.input_tokens == 30


async def test_the_budget_is_bounded_and_the_error_lists_the_last_issues() -> None:
    model = ScriptedModel(reply("nope"), reply("still nope"))
    repair = loop(max_attempts=2)
    with pytest.raises(StructuredOutputInvalid) as caught:
        await repair.run(model, QUESTION)
    assert caught.value.attempts == 2 and caught.value.provider == "openai"
    assert caught.value.issues["invalid"][0]["field"] == "$"
    assert [(a.number, a.valid) for a in repair.attempts] == [(1, False), (2, False)]
    assert model.script == []


async def test_attempts_made_before_a_provider_failure_are_kept_for_the_audit() -> None:
    model = ScriptedModel(reply("not json"), UpstreamError("down", provider="openai"))
    repair = loop()
    with pytest.raises(UpstreamError):
        await repair.run(model, QUESTION)
    assert [(a.number, a.valid, a.response) for a in repair.attempts] == [(1, False, "not json")]
