"""The delivery log's actions shared by the API and the CLI: retry one, send a test event."""

from __future__ import annotations

import datetime as dt

from app.errors import (
    DeliveryNotFound,
    DeliveryNotRetriable,
    StoreUnavailable,
    WebhooksNotConfigured,
)
from app.schemas import WebhookDeliveryInfo, WebhookTestSent
from app.store.webhooks import DeliveryRepository
from app.webhooks.dispatcher import WebhookDispatcher

TEST_EVENT = "webhook.test"


async def retry_delivery(
    deliveries: DeliveryRepository, dispatcher: WebhookDispatcher | None, delivery_id: int
) -> WebhookDeliveryInfo:
    """A failed delivery pending again, due now (404 / 409 otherwise); the dispatcher is woken."""
    retried = await deliveries.retry(delivery_id, now=dt.datetime.now(dt.UTC))
    if retried is None:
        current = await deliveries.get(delivery_id)
        if current is None:
            raise DeliveryNotFound(delivery_id)
        raise DeliveryNotRetriable(delivery_id, current.status)
    if dispatcher is not None:
        dispatcher.wake()
    return retried


async def send_test_event(dispatcher: WebhookDispatcher | None) -> WebhookTestSent:
    """A `webhook.test` event queued for every URL: proves the receivers' set-up end to end."""
    if dispatcher is None:
        raise WebhooksNotConfigured()
    event_id = await dispatcher.queue(TEST_EVENT, {"message": "A test event from GenAI Service."})
    if event_id is None:  # the store refused: the same 503 as any route that cannot write
        raise StoreUnavailable("The test event could not be queued; try again shortly.")
    return WebhookTestSent(event_id=event_id, urls=len(dispatcher.urls))
