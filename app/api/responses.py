"""The JSON response class: orjson, and still an answer when a text holds a lone surrogate.

A provider may answer with an escaped lone surrogate (`"\\ud800"`), which decodes to a Python str
that UTF-8 cannot encode. Such a body is sent with ASCII escapes instead, so the caller receives
exactly what the provider said rather than a 500; ordinary bodies pay nothing for this.

A pydantic model given as content is serialised once, by pydantic itself, straight to bytes; a
route returns `GatewayJSONResponse(model)` to skip FastAPI's second validation and dump of its
`response_model` (`bench/envelope_serialisation.py` has the figures).
"""

from __future__ import annotations

import json
from typing import Any

import orjson
from fastapi.responses import JSONResponse
from pydantic import BaseModel
from pydantic_core import PydanticSerializationError


def _ascii_json(content: Any) -> bytes:
    return json.dumps(content, ensure_ascii=True, allow_nan=False, separators=(",", ":")).encode(
        "ascii"
    )


def json_bytes(content: Any) -> bytes:
    """`content` (a model, or JSON-ready data) as JSON bytes: the fast encoders, and ASCII
    escapes when a text holds a lone surrogate (or an integer is wider than 64 bits). Every body
    and every stream event the service writes goes through here."""
    if isinstance(content, BaseModel):
        try:
            return content.__pydantic_serializer__.to_json(content)
        except PydanticSerializationError:  # a lone surrogate: UTF-8 cannot carry it
            return _ascii_json(content.model_dump(mode="json"))
    try:
        return orjson.dumps(content)
    except orjson.JSONEncodeError:  # a lone surrogate, or an integer wider than 64 bits
        return _ascii_json(content)


class GatewayJSONResponse(JSONResponse):
    def render(self, content: Any) -> bytes:
        return json_bytes(content)
