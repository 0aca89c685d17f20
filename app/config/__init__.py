"""Settings in one typed object (settings.py), read from the environment, `.env` and the
`genai.yaml` file (file.py); `from app.config import Settings` is the way in."""

from app.config.prices import LongContextPrice, ModelPrice, TokenRates
from app.config.settings import (
    BUILTIN_PROVIDERS,
    MAX_RETENTION_DAYS,
    TASK_MODEL_ENV_PREFIX,
    AnthropicSettings,
    AuditSettings,
    CacheSettings,
    EndpointSettings,
    LimitSettings,
    OllamaSettings,
    OpenAISettings,
    QuotaSettings,
    RequestSettings,
    RetentionSettings,
    Settings,
    SigningSettings,  # signed envelopes (issue 20)
    UpstreamSettings,
    get_settings,
    settings_error,
    task_model_env_name,
)

__all__ = [
    "BUILTIN_PROVIDERS",
    "MAX_RETENTION_DAYS",
    "TASK_MODEL_ENV_PREFIX",
    "AnthropicSettings",
    "AuditSettings",
    "CacheSettings",
    "EndpointSettings",
    "LimitSettings",
    "LongContextPrice",
    "ModelPrice",
    "OllamaSettings",
    "OpenAISettings",
    "QuotaSettings",
    "RequestSettings",
    "RetentionSettings",
    "Settings",
    "SigningSettings",
    "TokenRates",
    "UpstreamSettings",
    "get_settings",
    "settings_error",
    "task_model_env_name",
]
