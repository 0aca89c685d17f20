"""HTTP plumbing around the routes: pure ASGI middleware and uvicorn's bounded protocol.

Outermost first, as `create_app` stacks them: CORS (when configured) → request_context.py (the
request id, one log line, metrics, the span, the last-resort 500) → shedding.py (503 when full)
→ auth.py (401 before any body is read) → body_limit.py (413, and the request's input limits).
http_protocol.py sits below them all, in uvicorn: a request head too large (431) or too slow
(408) is answered before the app sees it.
"""
