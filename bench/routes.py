"""What each target sends: the service's routes, and the baseline request each is compared with.

Every service route carries the same prompt as `/v1/completions` (the rendered
`support/refund_answer` system prompt, the same user prompt, temperature and max_tokens), so the
routes differ only in their wire format, and the upstream is called through the same OpenAI SDK
path (`openai/gpt-4o-mini`, also from `/v1/messages`). `chat-tools` adds what a tool-using
client sends: 3 function tools and 4 turns after the user message (the assistant calls a tool,
the tool answers, the assistant calls two more, both answer). Its baseline, `tools`, passes that
same conversation and those tools through the SDK, so each comparison is like for like.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from bench import catalog

SERVICE_MODEL = f"openai/{catalog.MODEL_NAME}"


@dataclass(frozen=True)
class Route:
    """One measured request: where it goes, what it sends, and what it is compared with."""

    key: str
    path: str
    body: bytes
    about: str  # one line for the report
    baseline: str | None = None  # the key of the baseline request it is compared with

    @property
    def compared_with(self) -> str | None:
        """The name of the baseline target this route is compared with."""
        return None if self.baseline is None else baseline_target(self.baseline)

    def target(self, group: str) -> str:
        """The name of this route's target on a server: `service-sqlite-chat`, or the server's
        own name for /v1/completions (as before there were several routes)."""
        return group if self.key == "completions" else f"{group}-{self.key}"


def baseline_target(key: str) -> str:
    """The target name of a baseline request: `baseline` for the plain one."""
    return "baseline" if key == "plain" else f"baseline-{key}"


TOOLS: list[dict[str, Any]] = [
    {
        "type": "function",
        "function": {
            "name": "lookup_order",
            "description": "The order and its payments, by order id.",
            "parameters": {
                "type": "object",
                "properties": {
                    "order_id": {"type": "string", "description": "Like A-48213."},
                    "include_payments": {"type": "boolean"},
                },
                "required": ["order_id"],
                "additionalProperties": False,
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "get_refund_policy",
            "description": "One section of the written refund policy, verbatim.",
            "parameters": {
                "type": "object",
                "properties": {"section": {"type": "string", "enum": ["RF-1", "RF-2", "RF-3"]}},
                "required": ["section"],
                "additionalProperties": False,
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "create_refund_request",
            "description": "Open a refund request for the billing team to approve.",
            "parameters": {
                "type": "object",
                "properties": {
                    "order_id": {"type": "string"},
                    "amount": {"type": "number", "minimum": 0},
                    "currency": {"type": "string", "enum": ["EUR", "GBP", "USD"]},
                    "destination": {"type": "string", "enum": ["original_card", "bank_transfer"]},
                    "note": {"type": "string", "maxLength": 500},
                },
                "required": ["order_id", "amount", "currency", "destination"],
                "additionalProperties": False,
            },
        },
    },
]


def _call(call_id: str, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": call_id,
        "type": "function",
        "function": {"name": name, "arguments": json.dumps(arguments)},
    }


_ORDER = {
    "order_id": "A-48213",
    "status": "charged_twice",
    "card": {"last4": "1111", "status": "cancelled"},
    "payments": [
        {"amount": 49.9, "currency": "EUR", "at": "2026-11-12T10:02:11Z", "ip": "203.0.113.42"},
        {"amount": 49.9, "currency": "EUR", "at": "2026-11-12T10:02:14Z", "ip": "203.0.113.42"},
    ],
}

_POLICY = str(catalog.VARIABLES["policy"]).splitlines()

# After the user message: the assistant calls a tool, it answers, the assistant calls two more.
TOOL_TURNS: list[dict[str, Any]] = [
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            _call("call_b1", "lookup_order", {"order_id": "A-48213", "include_payments": True})
        ],
    },
    {"role": "tool", "tool_call_id": "call_b1", "content": json.dumps(_ORDER)},
    {
        "role": "assistant",
        "content": "Let me check the policy for duplicate charges and refunds to another account.",
        "tool_calls": [
            _call("call_b2", "get_refund_policy", {"section": "RF-1"}),
            _call("call_b3", "get_refund_policy", {"section": "RF-2"}),
        ],
    },
    {"role": "tool", "tool_call_id": "call_b2", "content": _POLICY[0]},
    {"role": "tool", "tool_call_id": "call_b3", "content": _POLICY[1]},
]


def _conversation(*, tools: bool) -> list[dict[str, Any]]:
    head = [
        {"role": "system", "content": catalog.rendered_system_prompt()},
        {"role": "user", "content": catalog.USER_PROMPT},
    ]
    return head + (TOOL_TURNS if tools else [])


def _json(value: dict[str, Any]) -> bytes:
    return json.dumps(value).encode()


def chat_body(*, tools: bool, model: str = SERVICE_MODEL) -> bytes:
    """POST /v1/chat/completions: the plain conversation, or the tool one with its tools."""
    body: dict[str, Any] = {
        "model": model,
        "messages": _conversation(tools=tools),
        "temperature": catalog.TEMPERATURE,
        "max_tokens": catalog.MAX_TOKENS,
    }
    if tools:
        body |= {"tools": TOOLS, "tool_choice": "auto"}
    return _json(body)


def messages_body() -> bytes:
    """POST /v1/messages (Anthropic's format) with the same prompt, to the same OpenAI model."""
    return _json(
        {
            "model": SERVICE_MODEL,
            "max_tokens": catalog.MAX_TOKENS,
            "system": catalog.rendered_system_prompt(),
            "messages": [{"role": "user", "content": catalog.USER_PROMPT}],
            "temperature": catalog.TEMPERATURE,
        }
    )


RENDER = Route("render", "/v1/render", catalog.render_body(), "the completion without its call")

# The baseline's two requests (bench/baseline.py): the rendered prompt, and the tool conversation.
BASELINES: dict[str, Route] = {
    "plain": Route("plain", "/v1/chat", catalog.baseline_body(), "system + user prompt"),
    "tools": Route(
        "tools",
        "/v1/chat/tools",
        chat_body(tools=True, model=catalog.MODEL_NAME),
        "the chat-tools conversation and tools",
    ),
}

ROUTES: dict[str, Route] = {
    route.key: route
    for route in (
        Route(
            "completions",
            "/v1/completions",
            catalog.completion_body(),
            f"pattern `{catalog.PATTERN_NAME}`",
            baseline="plain",
        ),
        Route(
            "chat",
            "/v1/chat/completions",
            chat_body(tools=False),
            "system + user message",
            baseline="plain",
        ),
        Route(
            "chat-tools",
            "/v1/chat/completions",
            chat_body(tools=True),
            "the same + 3 tools and 4 tool turns; the upstream answers with a tool call",
            baseline="tools",
        ),
        Route(
            "messages",
            "/v1/messages",
            messages_body(),
            "Anthropic's format, the same prompt, to the same OpenAI model",
            baseline="plain",
        ),
    )
}


def describe(routes: list[Route]) -> dict[str, dict[str, str | None]]:
    """The measured requests for the report: the baselines they need, then the routes."""
    needed = dict.fromkeys(BASELINES[r.baseline] for r in routes if r.baseline)
    return {
        **{baseline_target(b.key): {"path": b.path, "about": b.about} for b in needed},
        **{r.key: {"path": r.path, "about": r.about, "baseline": r.compared_with} for r in routes},
    }
