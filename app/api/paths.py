"""The doors' paths, each written once: the routes declare them, and the error dialect and load
shedding match a request against them before it is routed."""

from __future__ import annotations

from app.auth.protected import PROTECTED_PREFIX

V1 = PROTECTED_PREFIX  # every route but /healthz, /readyz and /metrics: each needs a key
COMPLETIONS = "/completions"
CHAT_COMPLETIONS = "/chat/completions"
MODELS = "/models"
MESSAGES = "/messages"

# The completion routes a full gateway answers 503 at the door (app/middleware/shedding.py);
# the probes and every other route are never shed there.
SHED_PATHS = frozenset({V1 + COMPLETIONS, V1 + CHAT_COMPLETIONS, V1 + MESSAGES})
