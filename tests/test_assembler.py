"""Tests for the three-section prompt assembler (app.prompts.assembler)."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.prompts.assembler import (
    AdapterInstructionFactory,
    AdapterInstructionRegistry,
    InstructionContext,
    PromptAssembler,
    TaskInstructions,
    default_registry,
    structured_output_instructions,
)
from app.routing.capabilities import Capabilities
from app.schemas import Message

SCHEMA: dict[str, object] = {
    "type": "object",
    "required": ["name"],
    "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
}
NO_SYSTEM = Capabilities(supports_system_prompt=False)
EXAMPLES = (
    Message(role="user", content="example question"),
    Message(role="assistant", content="example answer"),
)


def task(
    system: str = "TASK SYSTEM",
    user: str = "the user text",
    examples: tuple[Message, ...] = (),
    name: str = "summarise",
) -> TaskInstructions:
    return TaskInstructions(task=name, system=system, examples=examples, user=user)


def context(
    provider: str = "openai",
    name: str = "summarise",
    capabilities: Capabilities | None = None,
    schema: dict[str, object] | None = None,
    native: bool = False,
) -> InstructionContext:
    return InstructionContext(
        provider=provider,
        task=name,
        capabilities=capabilities or Capabilities(),
        output_schema=schema,
        native_structured_output=native,
    )


def constant(text: str | None) -> AdapterInstructionFactory:
    return lambda _context: text


def registry_with(*entries: tuple[str, str, str | None]) -> AdapterInstructionRegistry:
    registry = AdapterInstructionRegistry()
    for provider, task_name, text in entries:
        registry.register(provider, task_name, constant(text))
    return registry


# --- section order and separation ---------------------------------------------------------


def test_sections_appear_in_order_task_then_adapter_then_configured_then_request() -> None:
    assembler = PromptAssembler(
        registry_with(("*", "*", "ADAPTER")), task_instructions={"summarise": "CONFIGURED"}
    )
    system, _ = assembler.assemble_text(task(), context(), request_instructions="REQUEST")
    assert system == "TASK SYSTEM\n\nADAPTER\n\nCONFIGURED\n\nREQUEST"


def test_configured_task_instructions_apply_only_to_their_own_task() -> None:
    assembler = PromptAssembler(
        AdapterInstructionRegistry(), task_instructions={"translate": "CONFIGURED"}
    )
    system, _ = assembler.assemble_text(task(), context())
    assert system == "TASK SYSTEM"


def test_blank_request_and_configured_instructions_add_no_section() -> None:
    assembler = PromptAssembler(
        AdapterInstructionRegistry(), task_instructions={"summarise": "   \n"}
    )
    system, _ = assembler.assemble_text(task(), context(), request_instructions="  ")
    assert system == "TASK SYSTEM"


def test_sections_are_stripped_and_joined_by_exactly_one_blank_line() -> None:
    assembler = PromptAssembler(
        registry_with(("*", "*", "\n ADAPTER \n")), task_instructions={"summarise": " CONF\n"}
    )
    system, _ = assembler.assemble_text(
        task(system="  TASK\n\n"), context(), request_instructions="\nREQ "
    )
    assert system.split("\n\n") == ["TASK", "ADAPTER", "CONF", "REQ"]


def test_empty_task_system_starts_with_the_adapter_section() -> None:
    assembler = PromptAssembler(registry_with(("*", "*", "ADAPTER")))
    system, _ = assembler.assemble_text(task(system=""), context())
    assert system == "ADAPTER"


def test_assemble_text_returns_system_and_the_untouched_user_text() -> None:
    assembler = PromptAssembler(registry_with(("*", "*", "ADAPTER")))
    result = assembler.assemble_text(task(user="  hello\n"), context(), "REQ")
    assert result == ("TASK SYSTEM\n\nADAPTER\n\nREQ", "  hello\n")


section_text = st.text(
    alphabet=st.characters(exclude_categories=["Cs"]), min_size=1, max_size=40
).filter(lambda text: text.strip())


@given(
    system=section_text,
    adapter=st.lists(section_text, max_size=3),
    configured=st.none() | section_text,
    request=st.none() | section_text,
)
def test_assembly_is_append_only_the_task_system_is_a_prefix(
    system: str, adapter: list[str], configured: str | None, request: str | None
) -> None:
    registry = registry_with(*[("*", "*", text) for text in adapter])
    assembler = PromptAssembler(registry, {"summarise": configured} if configured else None)
    assembled, _ = assembler.assemble_text(task(system=system), context(), request)
    assert assembled.startswith(system.strip())
    later = [text.strip() for text in [*adapter, configured, request] if text]
    assert assembled == "\n\n".join([system.strip(), *later])


# --- the registry -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("provider", "task_name", "applies"),
    [
        ("openai", "summarise", True),
        ("*", "summarise", True),
        ("openai", "*", True),
        ("*", "*", True),
        ("anthropic", "summarise", False),
        ("openai", "translate", False),
        ("anthropic", "*", False),
        ("*", "translate", False),
    ],
)
def test_registry_matches_exact_and_wildcard_entries_only(
    provider: str, task_name: str, applies: bool
) -> None:
    registry = registry_with((provider, task_name, "TEXT"))
    found = registry.instructions(context(provider="openai", name="summarise"))
    assert found == (["TEXT"] if applies else [])


def test_registry_keeps_registration_order_across_matching_entries() -> None:
    registry = registry_with(
        ("openai", "summarise", "first"),
        ("anthropic", "*", "skipped"),
        ("*", "*", "second"),
        ("*", "summarise", "third"),
    )
    assert registry.instructions(context()) == ["first", "second", "third"]


@pytest.mark.parametrize("nothing", [None, "", "   ", "\n\t\n"])
def test_factory_returning_nothing_adds_no_section(nothing: str | None) -> None:
    assembler = PromptAssembler(registry_with(("*", "*", nothing), ("*", "*", "ADAPTER")))
    system, _ = assembler.assemble_text(task(), context())
    assert system == "TASK SYSTEM\n\nADAPTER"


def test_factories_receive_the_instruction_context() -> None:
    seen: list[InstructionContext] = []
    registry = AdapterInstructionRegistry()

    def record(ctx: InstructionContext) -> None:
        seen.append(ctx)

    registry.register("*", "*", record)
    ctx = context(provider="ollama", schema=SCHEMA)
    registry.instructions(ctx)
    assert seen == [ctx]


# --- structured-output instructions -------------------------------------------------------


def test_structured_instructions_without_native_support_spell_out_the_sorted_schema() -> None:
    text = structured_output_instructions(context(schema=SCHEMA, native=False))
    assert text is not None
    rendered = json.dumps(SCHEMA, sort_keys=True, indent=2, ensure_ascii=False)
    assert text.endswith(rendered)
    assert json.loads(text[text.index("{") :]) == SCHEMA
    assert text.index('"properties"') < text.index('"required"') < text.index('"type": "object"')
    assert "JSON Schema" in text


def test_structured_instructions_with_native_support_are_a_short_directive() -> None:
    text = structured_output_instructions(context(schema=SCHEMA, native=True))
    assert text is not None
    assert "JSON" in text
    assert '"properties"' not in text
    assert "\n" not in text


@pytest.mark.parametrize("native", [True, False])
def test_structured_instructions_are_absent_without_a_schema(native: bool) -> None:
    assert structured_output_instructions(context(schema=None, native=native)) is None


def test_default_registry_adds_the_schema_for_any_provider_and_task() -> None:
    assembler = PromptAssembler(default_registry())
    ctx = context(provider="some-provider", name="any-task", schema=SCHEMA)
    system, _ = assembler.assemble_text(task(name="any-task"), ctx)
    first, second = system.split("\n\n", 1)
    assert first == "TASK SYSTEM"
    assert second == structured_output_instructions(ctx)


def test_default_registry_adds_nothing_without_a_schema() -> None:
    system, _ = PromptAssembler(default_registry()).assemble_text(task(), context())
    assert system == "TASK SYSTEM"


# --- messages and folding -----------------------------------------------------------------


def test_examples_keep_their_order_before_the_final_user_message() -> None:
    examples = (
        Message(role="user", content="q1"),
        Message(role="assistant", content="a1"),
        Message(role="user", content="q2"),
        Message(role="assistant", content="a2"),
    )
    prompt = PromptAssembler(AdapterInstructionRegistry()).assemble(
        task(examples=examples, user="final"), context()
    )
    assert prompt.messages == [*examples, Message(role="user", content="final")]
    assert prompt.system == "TASK SYSTEM"
    assert prompt.system_folded is False


def test_without_system_prompt_support_the_system_text_tops_the_only_user_message() -> None:
    assembler = PromptAssembler(registry_with(("*", "*", "ADAPTER")))
    prompt = assembler.assemble(task(user="question"), context(capabilities=NO_SYSTEM), "REQ")
    assert prompt.system == ""
    assert prompt.system_folded is True
    assert prompt.messages == [
        Message(role="user", content="TASK SYSTEM\n\nADAPTER\n\nREQ\n\nquestion")
    ]


def test_folding_goes_into_the_first_user_message_when_examples_precede() -> None:
    prompt = PromptAssembler(AdapterInstructionRegistry()).assemble(
        task(examples=EXAMPLES, user="question"), context(capabilities=NO_SYSTEM)
    )
    assert prompt.system == ""
    assert prompt.system_folded is True
    assert prompt.messages == [
        Message(role="user", content="TASK SYSTEM\n\nexample question"),
        Message(role="assistant", content="example answer"),
        Message(role="user", content="question"),
    ]


def test_folding_skips_leading_assistant_messages() -> None:
    examples = (Message(role="assistant", content="greeting"),)
    prompt = PromptAssembler(AdapterInstructionRegistry()).assemble(
        task(examples=examples, user="question"), context(capabilities=NO_SYSTEM)
    )
    assert prompt.messages == [
        Message(role="assistant", content="greeting"),
        Message(role="user", content="TASK SYSTEM\n\nquestion"),
    ]


def test_with_an_empty_system_text_nothing_is_folded() -> None:
    prompt = PromptAssembler(AdapterInstructionRegistry()).assemble(
        task(system="  ", examples=EXAMPLES, user="question"), context(capabilities=NO_SYSTEM)
    )
    assert prompt.system == ""
    assert prompt.system_folded is False
    assert prompt.messages == [*EXAMPLES, Message(role="user", content="question")]


def test_with_system_prompt_support_nothing_is_folded() -> None:
    prompt = PromptAssembler(AdapterInstructionRegistry()).assemble(
        task(examples=EXAMPLES, user="question"), context()
    )
    assert prompt.system == "TASK SYSTEM"
    assert prompt.system_folded is False
    assert prompt.messages[0] == EXAMPLES[0]


@given(
    turns=st.lists(
        st.tuples(st.sampled_from(["user", "assistant"]), st.text(max_size=20)), max_size=6
    ),
    user=st.text(max_size=20),
)
def test_folding_changes_only_the_first_user_message(
    turns: list[tuple[str, str]], user: str
) -> None:
    examples = tuple(Message(role=role, content=content) for role, content in turns)
    plain = PromptAssembler(AdapterInstructionRegistry()).assemble(
        task(examples=examples, user=user), context()
    )
    folded = PromptAssembler(AdapterInstructionRegistry()).assemble(
        task(examples=examples, user=user), context(capabilities=NO_SYSTEM)
    )
    first_user = next(i for i, m in enumerate(plain.messages) if m.role == "user")
    assert len(folded.messages) == len(plain.messages)
    for index, (before, after) in enumerate(zip(plain.messages, folded.messages, strict=True)):
        if index == first_user:
            assert after == Message(role="user", content=f"TASK SYSTEM\n\n{before.content}")
        else:
            assert after == before
