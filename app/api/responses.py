"""The JSON response class: UTF-8 as usual, and still an answer when a text holds a lone surrogate.

A provider may answer with an escaped lone surrogate (`"\\ud800"`), which decodes to a Python str
that UTF-8 cannot encode. Such a body is sent with ASCII escapes instead, so the caller receives
exactly what the provider said rather than a 500; ordinary bodies pay nothing for this.
"""

from __future__ import annotations

import json
from typing import Any

from fastapi.responses import JSONResponse


class GatewayJSONResponse(JSONResponse):
    def render(self, content: Any) -> bytes:
        try:
            return super().render(content)
        except UnicodeEncodeError:
            return json.dumps(
                content, ensure_ascii=True, allow_nan=False, separators=(",", ":")
            ).encode("ascii")
