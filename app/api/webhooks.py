"""The webhook delivery log over HTTP (admin only): list, retry a failed one, send a test."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Query

from app.api.body import OffLoopBodyRoute
from app.api.deps import AdminLogDep, DeliveriesDep, IsAdmin, WebhooksDep
from app.api.errors import error_responses
from app.audit.events import delivery_target
from app.schemas import DeliveryStatus, WebhookDeliveryInfo, WebhookDeliveryList, WebhookTestSent
from app.webhooks.deliveries import retry_delivery, send_test_event

router = APIRouter(
    prefix="/v1/webhooks", tags=["webhooks"], dependencies=[IsAdmin], route_class=OffLoopBodyRoute
)

DeliveryIdPath = Annotated[int, Path(ge=1, le=2**31 - 1, description="A delivery's id.")]


@router.get(
    "/deliveries",
    operation_id="listWebhookDeliveries",
    summary="The newest webhook deliveries first: what was sent where, and how it went",
    responses=error_responses(422),
)
async def list_webhook_deliveries(
    deliveries: DeliveriesDep,
    status: DeliveryStatus | None = Query(default=None, description="Only this status."),
    event_type: str | None = Query(
        default=None, max_length=100, pattern=r"^[a-z_.]+$", description="Only this event type."
    ),
    limit: int = Query(default=50, ge=1, le=1000),
) -> WebhookDeliveryList:
    found = await deliveries.recent(limit=limit, status=status, event_type=event_type)
    return WebhookDeliveryList(deliveries=found)


@router.post(
    "/deliveries/{delivery_id}/retry",
    operation_id="retryWebhookDelivery",
    summary="Send a failed delivery again, from a fresh count of attempts",
    responses=error_responses(404, 409, 422),
)
async def retry_webhook_delivery(
    delivery_id: DeliveryIdPath,
    deliveries: DeliveriesDep,
    webhooks: WebhooksDep,
    admin_log: AdminLogDep,
) -> WebhookDeliveryInfo:
    retried = await retry_delivery(deliveries, webhooks, delivery_id)
    await admin_log.record(
        "webhook.retried",
        target=delivery_target(delivery_id),
        detail={"event_type": retried.event_type},  # not the URL: it may carry a token
    )
    return retried


@router.post(
    "/test",
    operation_id="sendTestWebhook",
    status_code=202,
    summary="Queue a `webhook.test` event for every configured receiver",
    responses=error_responses(409),
)
async def send_test_webhook(webhooks: WebhooksDep, admin_log: AdminLogDep) -> WebhookTestSent:
    sent = await send_test_event(webhooks)
    await admin_log.record("webhook.tested", detail={"event_id": sent.event_id, "urls": sent.urls})
    return sent
