"""Webhook deliveries as the API and CLI show them: the delivery log of release events."""

from __future__ import annotations

import datetime as dt
from typing import Any, Literal

from pydantic import Field

from app.schemas.base import FrozenModel

DeliveryStatus = Literal["pending", "delivered", "failed"]


class WebhookDeliveryInfo(FrozenModel):
    """One event bound for one receiver; `attempts` counts the POSTs made so far."""

    id: int
    event_id: str = Field(description="The event's id, shared by its URLs: receivers dedupe on it.")
    event_type: str
    url: str
    status: DeliveryStatus
    attempts: int
    next_attempt_at: dt.datetime
    last_status_code: int | None = None
    last_error: str | None = Field(default=None, description="Why the last attempt failed.")
    created_at: dt.datetime
    delivered_at: dt.datetime | None = None
    payload: dict[str, Any] = Field(description="The JSON body posted to the receiver.")


class WebhookDeliveryList(FrozenModel):
    deliveries: list[WebhookDeliveryInfo]


class WebhookTestSent(FrozenModel):
    """A `webhook.test` event was queued for each configured URL."""

    event_id: str
    urls: int
