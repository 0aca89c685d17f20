"""Prove the bench upstream speaks each provider's API as the official SDKs read it.

    python -m bench.upstream_check http://127.0.0.1:<port>

Exits non-zero, naming the SDK, when one of them cannot parse an answer (a text answer from
each, and a tool call from OpenAI's and Anthropic's).
"""

from __future__ import annotations

import asyncio
import json
import sys

import anthropic
import ollama
import openai

from bench.upstream import ANSWER

SCHEMA: dict[str, object] = {
    "type": "object",
    "properties": {"who": {"type": "string"}},
    "required": ["who"],
}
MESSAGES = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hello?"}]


async def check(base_url: str) -> list[str]:
    """One call through each SDK; the problems found (empty when all three parse)."""
    problems: list[str] = []
    async with openai.AsyncOpenAI(
        base_url=f"{base_url}/v1", api_key="sk-bench", max_retries=0
    ) as oa:
        completion = await oa.chat.completions.create(
            model="gpt-4o-mini",
            messages=[
                {"role": "system", "content": "Be brief."},
                {"role": "user", "content": "Hello?"},
            ],
            max_tokens=50,
        )
        if completion.choices[0].message.content != ANSWER or completion.usage is None:
            problems.append(f"openai: unexpected {completion!r}")
        with_tools = await oa.chat.completions.create(
            model="gpt-4o-mini",
            messages=[{"role": "user", "content": "Hello?"}],
            tools=[{"type": "function", "function": {"name": "greet", "parameters": SCHEMA}}],
        )
        calls = with_tools.choices[0].message.tool_calls or []
        if with_tools.choices[0].finish_reason != "tool_calls" or [
            (c.function.name, json.loads(c.function.arguments))
            for c in calls
            if c.type == "function"
        ] != [("greet", {"who": "bench"})]:
            problems.append(f"openai, with tools: unexpected {with_tools!r}")
    async with anthropic.AsyncAnthropic(base_url=base_url, api_key="sk-bench", max_retries=0) as an:
        message = await an.messages.create(
            model="claude-sonnet-4-6",
            system="Be brief.",
            messages=[{"role": "user", "content": "Hello?"}],
            max_tokens=50,
        )
        block = message.content[0]
        if getattr(block, "text", None) != ANSWER or message.usage.output_tokens != 19:
            problems.append(f"anthropic: unexpected {message!r}")
        tool_use = await an.messages.create(
            model="claude-sonnet-4-6",
            messages=[{"role": "user", "content": "Hello?"}],
            tools=[{"name": "greet", "input_schema": SCHEMA}],
            max_tokens=50,
        )
        block = tool_use.content[0]
        if tool_use.stop_reason != "tool_use" or getattr(block, "input", None) != {"who": "bench"}:
            problems.append(f"anthropic, with tools: unexpected {tool_use!r}")
    reply = await ollama.AsyncClient(host=base_url).chat(model="llama3.2", messages=MESSAGES)
    if reply.message.content != ANSWER or not reply.done:
        problems.append(f"ollama: unexpected {reply!r}")
    return problems


def main() -> None:
    problems = asyncio.run(check(sys.argv[1].rstrip("/")))
    for problem in problems:
        print(problem, file=sys.stderr)
    if problems:
        sys.exit(1)
    print(
        "openai, anthropic and ollama SDKs parse the bench upstream (openai, anthropic: tools too)"
    )


if __name__ == "__main__":
    main()
