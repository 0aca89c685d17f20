"""The prompts the harness sends: one realistic pattern, its request bodies, and big catalogs.

The benchmarked pattern renders a ~1.6 KB system prompt from a few variables; every request
sends the same variables, so the system prompt repeats (as a real application's does). The
baseline gets that same rendered text, so both servers send the upstream an equivalent prompt.
"""

from __future__ import annotations

import json
import random
import textwrap
from pathlib import Path
from typing import Any

import jinja2

PATTERN_NAME = "support/refund_answer"
MODEL_NAME = "gpt-4o-mini"
TEMPERATURE = 0.2
MAX_TOKENS = 400

_PATTERN_BODY = """\
You are the customer support assistant of {{ company }}. You answer one customer at a time,
in writing, on behalf of the billing team. Address the customer as {{ customer_name }}.
Write in a {{ tone }} tone and answer in the language of the customer's message.

Refund policy (quote it exactly when you rely on it, never paraphrase amounts or deadlines):
<policy>
{{ policy }}
</policy>

How to answer:
- Start with one sentence that says whether the request can be granted under the policy.
- Then explain the next steps in at most four short bullet points.
- If the customer asks for the money to go somewhere other than the original payment method,
  say that this needs a written request and a verified account, and name the form to use.
- Never repeat card numbers, IBANs, phone numbers or email addresses back to the customer.
- If the policy does not cover the question, say so and offer to pass it to a human agent.
- Do not promise dates the policy does not state; do not invent fees, forms or departments.
{% for channel in channels %}
- The customer may also be reached by {{ channel }}; mention it only if they asked for it.
{%- endfor %}

Sign the answer as "The {{ company }} billing team". Keep the whole answer under 180 words.
"""

_PATTERN_FILE = """\
---
description: Answer a billing question about refunds from the written refund policy.
model_hint: openai/gpt-4o-mini
variables:
  company: The company the assistant speaks for.
  customer_name: How to address the customer.
  tone: The register of the answer.
  policy: The refund policy text to quote from.
  channels: Contact channels the customer may be reached on.
defaults:
  tone: friendly but precise
params: {temperature: 0.2, max_tokens: 400}
tags: [support, billing]
---
"""

VARIABLES: dict[str, Any] = {
    "company": "Northwind Payments",
    "customer_name": "Mr Smith",
    "policy": (
        "RF-1. Duplicate charges are refunded in full within 5-7 working days.\n"
        "RF-2. Refunds go to the original card unless the customer names another account in "
        "writing on form RF-2B; bank transfers need a verified IBAN.\n"
        "RF-3. Refunds older than 120 days need approval from the billing team lead.\n"
        "RF-4. Chargebacks opened with the card issuer pause any refund until they close."
    ),
    "channels": ["email", "phone"],
}

USER_PROMPT = (
    "Hello, my name is John Smith and I wrote to you last week about the double charge on my "
    "card ending 1111. I asked for the money to be sent to my bank account instead, IBAN "
    "GB82 WEST 1234 5698 7654 32, because the card has since been cancelled. Can you tell me "
    "whether that is allowed under your refund policy, how long it will take, and whether "
    "I need to send anything else? You can reach me at john.smith@example.com or on "
    "+44 20 7946 0958 during office hours. Thank you, John."
)


def rendered_system_prompt() -> str:
    """The system prompt the service renders from the pattern (defaults included)."""
    variables = {"tone": "friendly but precise", **VARIABLES}
    return str(jinja2.Template(_PATTERN_BODY, keep_trailing_newline=True).render(**variables))


def completion_body() -> bytes:
    """POST /v1/completions on the service."""
    return json.dumps(
        {
            "pattern_key": PATTERN_NAME,
            "variables": VARIABLES,
            "user_prompt": USER_PROMPT,
            "model": f"openai/{MODEL_NAME}",
        }
    ).encode()


def render_body() -> bytes:
    """POST /v1/render on the service: the same request without the provider call."""
    return json.dumps(
        {"pattern_key": PATTERN_NAME, "variables": VARIABLES, "user_prompt": USER_PROMPT}
    ).encode()


def baseline_body() -> bytes:
    """POST /v1/chat on the baseline: the same prompt, already rendered."""
    return json.dumps(
        {
            "model": MODEL_NAME,
            "system": rendered_system_prompt(),
            "user_prompt": USER_PROMPT,
            "temperature": TEMPERATURE,
            "max_tokens": MAX_TOKENS,
        }
    ).encode()


_WORDS = [
    *("account", "invoice", "customer", "ledger", "refund", "policy", "review", "summary"),
    *("contract", "team", "report", "deadline", "release", "draft", "figure", "quarter"),
    *("margin", "forecast", "request", "owner", "approval", "budget", "supplier", "shipment"),
    *("warehouse", "order", "return", "warranty", "claim", "incident", "outage", "escalation"),
]


def _paragraph(rng: random.Random, sentences: int) -> str:
    out = []
    for _ in range(sentences):
        words = [rng.choice(_WORDS) for _ in range(rng.randint(8, 16))]
        out.append(" ".join(words).capitalize() + ".")
    return textwrap.fill(" ".join(out), width=96)


def _generated_pattern(index: int, rng: random.Random) -> str:
    """A valid pattern of a few KB: front-matter, prose, a condition, a loop and a filter."""
    prose = "\n\n".join(_paragraph(rng, rng.randint(4, 7)) for _ in range(rng.randint(3, 5)))
    return (
        "---\n"
        f"description: Generated pattern {index} for the catalog-size benchmark.\n"
        "variables:\n"
        "  topic: What the text is about.\n"
        "  audience: Who reads the answer.\n"
        "  rules: Extra rules, one per item.\n"
        "  strict: Whether to refuse anything off-topic.\n"
        "defaults:\n"
        "  audience: colleagues\n"
        "  rules: []\n"
        "  strict: false\n"
        f"params: {{temperature: 0.{index % 10}, max_tokens: {200 + index % 5 * 100}}}\n"
        f"tags: [generated, group{index % 17}]\n"
        "---\n"
        f"You help with {{{{ topic | lower }}}} for {{{{ audience }}}} (pattern {index}).\n\n"
        f"{prose}\n\n"
        "{% if strict %}Refuse anything that is not about {{ topic }}.{% endif %}\n"
        "{% for rule in rules %}\n- {{ rule }}\n{% endfor %}\n"
    )


def write_catalog(root: Path, count: int, *, seed: int = 8) -> None:
    """`count` patterns under `root`: the benchmarked one and generated ones, most nested."""
    (root / "support").mkdir(parents=True, exist_ok=True)
    (root / PATTERN_NAME).with_suffix(".md").write_text(_PATTERN_FILE + _PATTERN_BODY)
    rng = random.Random(seed)
    for index in range(1, count):
        if index % 10 == 0:
            path = root / f"generated_{index:04d}.md"
        else:
            path = root / f"team_{index % 23:02d}" / f"area_{index % 7}" / f"p_{index:04d}.md"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(_generated_pattern(index, rng))
