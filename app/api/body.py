"""Request bodies: a large JSON body is parsed and validated in a worker thread.

FastAPI parses and validates a body on the event loop. For a few kilobytes that is the fastest
way; for a body of megabytes (variables, a long conversation, tool schemas) it is tenths of a
second in which no other request, not even `/healthz`, is served. This route class reads and
validates a JSON body itself, with FastAPI's own field and error shapes: inline when small, in a
worker thread past OFFLOAD_CHARS (app/concurrency/offload.py). It hands FastAPI the validated
model, which pydantic accepts as it is (an instance of the model is not validated again). A thread
does not help a single C call that holds the interpreter lock, so a body holding more values than
a request may is refused before it is parsed, and the parser is the fastest there is.
"""

from __future__ import annotations

import email.message
import json
import re
import sys
from collections.abc import Callable, Coroutine
from typing import Any

import orjson
from fastapi.exceptions import RequestValidationError
from fastapi.routing import APIRoute
from starlette.requests import Request
from starlette.responses import Response

from app.concurrency.offload import note_body_size, off_loop
from app.errors import RequestProblem
from app.schemas.base import current_limits, too_many_values

Handler = Callable[[Request], Coroutine[Any, Any, Response]]


def _is_json(request: Request) -> bool:
    """FastAPI's own rule (strict content type): `application/json` or `application/*+json`."""
    content_type = request.headers.get("content-type")
    if not content_type:
        return False
    message = email.message.Message()
    message["content-type"] = content_type
    subtype = message.get_content_subtype()
    return message.get_content_maintype() == "application" and (
        subtype == "json" or subtype.endswith("+json")
    )


# A JSON string (escapes skipped whole), or a comma outside one.
_STRING_OR_COMMA = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"|,')


def _more_values_than(body: bytes, limit: int) -> bool:
    """True when the body holds more than `limit` JSON values, judged without parsing it.

    Parsing is one long call that holds the interpreter lock, so even in a worker thread it
    stalls the event loop; a body of hundreds of thousands of values is refused before it. Every
    comma outside a string separates two values, so counting them never refuses a body the
    GENAI_REQUEST__MAX_VALUES walk would accept. A body with fewer commas anywhere is not scanned
    at all; the scan is a loop in Python, which lets the event loop run between its steps.
    """
    if body.count(b",") < limit:
        return False
    commas = 0
    for found in _STRING_OR_COMMA.finditer(body):
        if len(found.group()) == 1:
            commas += 1
            if commas >= limit:
                return True
    return False


def _parsed(body: bytes) -> Any:
    """The body's JSON: orjson (twice as fast, the lock held half as long), or the standard
    library for what orjson refuses (a lone surrogate escape, a number wider than 64 bits, NaN),
    so that validation can say exactly what is wrong, or for the error itself."""
    try:
        return orjson.loads(body)
    except orjson.JSONDecodeError:
        pass
    try:
        return json.loads(body)
    except json.JSONDecodeError as exc:  # FastAPI's answer: 422, json_invalid, where it broke
        error = {
            "type": "json_invalid",
            "loc": ("body", exc.pos),
            "msg": "JSON decode error",
            "input": {},
            "ctx": {"error": exc.msg},
        }
        raise RequestValidationError([error]) from exc
    except UnicodeDecodeError as exc:
        raise RequestProblem("The request body is not valid UTF-8.") from exc
    except RecursionError as exc:
        raise RequestProblem("The JSON body is nested too deeply to read.") from exc
    except ValueError as exc:  # int(): more digits than the interpreter converts
        raise RequestProblem(
            f"The JSON body has a number longer than {sys.get_int_max_str_digits()} digits."
        ) from exc


def _validated(field: Any, body: bytes) -> tuple[Any, list[dict[str, Any]]]:
    """The body as the route's model and no errors, or the validation errors; a body that is
    not JSON at all raises (FastAPI, too, refuses it before anything else)."""
    limit = current_limits().max_values
    if _more_values_than(body, limit):
        message = too_many_values(limit)
        error = {
            "type": "value_error",
            "loc": ("body",),
            "msg": f"Value error, {message}",
            "input": {},
            "ctx": {"error": message},
        }
        return None, [error]
    model, errors = field.validate(_parsed(body), {}, loc=("body",))
    return model, errors


class _Invalid:
    """Handed to FastAPI in place of a body that failed validation: the route's dependencies
    still run first (a caller without the scope gets its 403, not the 422), then FastAPI refuses
    this at once and the body's own errors are put in the place of that refusal.

    FastAPI validates a body model from attributes too, so reading any field of this fails:
    otherwise a model whose fields are all optional (a PATCH body) would be made from it, empty,
    and a refused body would be answered as an empty change."""

    def __getattr__(self, name: str) -> Any:
        raise LookupError("this body failed validation")


_INVALID = _Invalid()


class OffLoopBodyRoute(APIRoute):
    """A route whose large JSON body never stalls the event loop (and marks the request large,
    so every later stage leaves the loop too)."""

    def get_route_handler(self) -> Handler:
        handler: Handler = super().get_route_handler()
        field = self.body_field
        if field is None:
            return handler

        async def read_then_handle(request: Request) -> Response:
            body = await request.body()
            note_body_size(len(body))
            if not (body and _is_json(request)):
                return await handler(request)
            model, errors = await off_loop(lambda: _validated(field, body), len(body))
            # Starlette's Request.json() returns what it finds here; FastAPI then accepts the
            # validated model as it is (pydantic does not validate an instance again).
            request._json = _INVALID if errors else model
            try:
                return await handler(request)
            except RequestValidationError as refused:
                if not errors:
                    raise
                others = [e for e in refused.errors() if tuple(e.get("loc", ()))[:1] != ("body",)]
                raise RequestValidationError([*others, *errors]) from None

        return read_then_handle
