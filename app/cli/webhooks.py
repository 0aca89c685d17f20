"""`genai webhooks`: the delivery log of release events, and a retry of a failed delivery."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Literal

import typer

from app.audit.events import CLI, delivery_target
from app.cli.runner import run
from app.schemas import WebhookDeliveryInfo
from app.webhooks.deliveries import retry_delivery

if TYPE_CHECKING:
    from app.runtime import Runtime

webhooks_cli = typer.Typer(
    help="Webhooks: the delivery log of release events.", no_args_is_help=True
)


def _line(delivery: WebhookDeliveryInfo) -> str:
    code = delivery.last_status_code if delivery.last_status_code is not None else "-"
    error = (
        f"  {delivery.last_error}" if delivery.last_error and delivery.status != "delivered" else ""
    )
    return (
        f"{delivery.id}  {delivery.created_at:%Y-%m-%d %H:%M:%S}  {delivery.status:<9}  "
        f"{delivery.event_type}  attempts={delivery.attempts}  last={code}  {delivery.url}{error}"
    )


@webhooks_cli.command("deliveries")
def webhooks_deliveries(
    status: Annotated[
        Literal["pending", "delivered", "failed"] | None,
        typer.Option(help="Only deliveries with this status."),
    ] = None,
    event_type: Annotated[str | None, typer.Option(help="Only this event type.")] = None,
    limit: Annotated[int, typer.Option(min=1, max=1000, help="How many, newest first.")] = 50,
) -> None:
    """The newest deliveries first: id, when, status, event, attempts, last HTTP status, URL."""

    async def work(runtime: Runtime) -> list[WebhookDeliveryInfo]:
        return await runtime.deliveries.recent(limit=limit, status=status, event_type=event_type)

    for delivery in run(work):
        typer.echo(_line(delivery))


@webhooks_cli.command("retry")
def webhooks_retry(delivery_id: Annotated[int, typer.Argument(min=1)]) -> None:
    """Send a failed delivery again (a running server picks it up within its poll interval)."""

    async def work(runtime: Runtime) -> WebhookDeliveryInfo:
        retried = await retry_delivery(runtime.deliveries, None, delivery_id)
        await runtime.admin_events.record(
            CLI,
            "webhook.retried",
            target=delivery_target(delivery_id),
            detail={"event_type": retried.event_type},
        )
        return retried

    typer.echo(f"pending again {_line(run(work))}")
