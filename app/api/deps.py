"""Named dependencies keep route signatures short.

They are `async def` on purpose: FastAPI runs plain `def` dependencies in its thread pool, a
needless hop per request for what are attribute lookups.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Annotated, Any, cast

from fastapi import Depends, Header, Request, Security
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from app.api.disconnect import cancel_on_disconnect
from app.api.sse import EventStreamResponse, Frames
from app.audit.chain import ChainVerifier  # the audit chain (issue 20)
from app.audit.events import Actor, ActorLog, AdminEvents  # admin event log (issue 20)
from app.audit.replay import Replayer
from app.audit.trail import AuditTrail
from app.auth.authenticator import Authenticator
from app.auth.keys import Scope
from app.auth.principal import Principal
from app.catalog import PatternCatalog
from app.catalog.labels import TemplateLabels
from app.catalog.renderer import TemplateRenderer
from app.config import Settings
from app.errors import AuditChainDisabled
from app.observability.metrics import Metrics
from app.observability.readiness import AuditBacklog, Readiness
from app.providers.registry import ProviderRegistry
from app.quotas.guard import QuotaGuard
from app.runtime import Runtime
from app.schemas import CompletionEnvelope, RenderRequest
from app.service import GenAIService
from app.snippets import SnippetLibrary
from app.store.teams import TeamRepository
from app.store.templates import TemplateRepository
from app.store.webhooks import DeliveryRepository  # webhooks
from app.tracking.signing import Signer  # signed envelopes (issue 20)
from app.webhooks import EventSink  # webhooks
from app.webhooks.dispatcher import WebhookDispatcher  # webhooks


def _runtime(request: Request) -> Runtime:
    return cast(Runtime, request.app.state.runtime)


async def get_service(request: Request) -> GenAIService:
    return _runtime(request).service


async def get_replayer(request: Request) -> Replayer:
    return _runtime(request).replayer


async def get_audit_trail(request: Request) -> AuditTrail:
    return _runtime(request).audit


async def get_catalog(request: Request) -> PatternCatalog:
    return _runtime(request).patterns


async def get_templates(request: Request) -> TemplateRepository:
    return _runtime(request).templates


async def get_snippets(request: Request) -> SnippetLibrary:
    return _runtime(request).snippets


async def get_quotas(request: Request) -> QuotaGuard:
    return _runtime(request).quotas


async def get_authenticator(request: Request) -> Authenticator:
    return _runtime(request).authenticator


async def get_teams(request: Request) -> TeamRepository:
    return _runtime(request).teams


async def get_deliveries(request: Request) -> DeliveryRepository:  # webhooks
    return _runtime(request).deliveries


async def get_chain(request: Request) -> ChainVerifier:  # the audit chain (issue 20)
    chain = _runtime(request).chain
    if chain is None:
        raise AuditChainDisabled()
    return chain


async def get_chain_if_on(request: Request) -> ChainVerifier | None:  # the audit status
    return _runtime(request).chain


async def get_webhooks(request: Request) -> WebhookDispatcher | None:  # webhooks
    return _runtime(request).webhooks


async def get_events(request: Request) -> EventSink:  # webhooks: where release actions emit
    return _runtime(request).events


# Declares the bearer scheme in the OpenAPI document; the Authenticator reads the header itself
# so that every refusal carries the service's own error body.
_bearer = HTTPBearer(
    auto_error=False, description="An API key from `genai keys create` or POST /v1/keys."
)


def require(scope: Scope) -> Any:
    """A route dependency: the caller's key must allow `scope` (the OpenAPI lists it)."""

    async def authorize(
        request: Request,
        _: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
    ) -> Principal:
        authenticator = _runtime(request).authenticator
        principal = request.scope.get("state", {}).get("principal")
        if principal is None:  # an app assembled without AuthMiddleware still checks the key
            principal = await authenticator.authenticate(
                authenticator.presented(
                    request.headers.get("authorization"), request.headers.get("x-api-key")
                )
            )
        authenticator.require(principal, scope)
        request.scope.setdefault("state", {})["principal"] = principal
        return cast(Principal, principal)

    return Security(authorize, scopes=[scope.value])


async def get_app_settings(request: Request) -> Settings:
    """The settings the app was built with (not `app.config.get_settings`: tests pass their own)."""
    return _runtime(request).settings


async def get_providers(request: Request) -> ProviderRegistry:
    return _runtime(request).providers


async def get_renderer(request: Request) -> TemplateRenderer:
    return _runtime(request).renderer


async def get_readiness(request: Request) -> Readiness:
    return _runtime(request).readiness


async def get_metrics(request: Request) -> Metrics:
    return _runtime(request).metrics


async def get_audit_backlog(request: Request) -> AuditBacklog:
    return _runtime(request).writer


async def get_caller(request: Request) -> Principal | None:
    """The calling key (its limits with it); set by the scope check."""
    principal = request.scope.get("state", {}).get("principal")
    return principal if isinstance(principal, Principal) else None


async def get_request_id(request: Request) -> str | None:
    return cast(str | None, request.scope.get("state", {}).get("request_id"))


@dataclass(frozen=True, slots=True)
class Completer:
    """One request's way into the pipeline: its id, deadline and key go with every call, and a
    client that goes away cancels the work (the job is recorded as cancelled)."""

    service: GenAIService
    request: Request
    request_id: str
    deadline_ms: int | None
    caller: Principal | None
    send_timeout: float  # one send of a stream, waiting on a client that stopped reading

    async def complete(self, render: RenderRequest) -> CompletionEnvelope:
        return await cancel_on_disconnect(
            self.request,
            self.service.complete(
                render,
                request_id=self.request_id,
                deadline_ms=self.deadline_ms,
                caller=self.caller,
            ),
        )

    async def stream(
        self,
        render: RenderRequest,
        *,
        frames: Frames | None = None,
        headers: dict[str, str] | None = None,
    ) -> EventStreamResponse:
        """The stream as Server-Sent Events (`frames` writes each event; default the gateway's
        own). Failures before the first event raise here (answered as JSON errors); later ones
        end the stream with its failure event."""
        events = await cancel_on_disconnect(
            self.request,
            self.service.stream(
                render,
                request_id=self.request_id,
                deadline_ms=self.deadline_ms,
                caller=self.caller,
            ),
        )
        return EventStreamResponse(
            events,
            request_id=self.request_id,
            frames=frames,
            headers=headers,
            send_timeout=self.send_timeout,
        )


DeadlineDep = Annotated[
    int | None,
    Header(
        alias="x-genai-deadline-ms",
        ge=1,
        le=86_400_000,
        description="Shortens this request's total deadline (milliseconds; every retry and "
        "fallback included). It can never lengthen the configured one.",
    ),
]
ServiceDep = Annotated[GenAIService, Depends(get_service)]
ReplayerDep = Annotated[Replayer, Depends(get_replayer)]
AuditTrailDep = Annotated[AuditTrail, Depends(get_audit_trail)]
CatalogDep = Annotated[PatternCatalog, Depends(get_catalog)]
TemplatesDep = Annotated[TemplateRepository, Depends(get_templates)]
SnippetsDep = Annotated[SnippetLibrary, Depends(get_snippets)]
RequestIdDep = Annotated[str | None, Depends(get_request_id)]
CallerDep = Annotated[Principal | None, Depends(get_caller)]
AuthenticatorDep = Annotated[Authenticator, Depends(get_authenticator)]
QuotasDep = Annotated[QuotaGuard, Depends(get_quotas)]
TeamsDep = Annotated[TeamRepository, Depends(get_teams)]
RendererDep = Annotated[TemplateRenderer, Depends(get_renderer)]
ReadinessDep = Annotated[Readiness, Depends(get_readiness)]
MetricsDep = Annotated[Metrics, Depends(get_metrics)]
AuditBacklogDep = Annotated[AuditBacklog, Depends(get_audit_backlog)]
SettingsDep = Annotated[Settings, Depends(get_app_settings)]
ProvidersDep = Annotated[ProviderRegistry, Depends(get_providers)]
DeliveriesDep = Annotated[DeliveryRepository, Depends(get_deliveries)]  # webhooks
WebhooksDep = Annotated[WebhookDispatcher | None, Depends(get_webhooks)]  # webhooks
EventsDep = Annotated[EventSink, Depends(get_events)]  # webhooks
ChainDep = Annotated[ChainVerifier, Depends(get_chain)]  # the audit chain (issue 20)
ChainIfOnDep = Annotated[ChainVerifier | None, Depends(get_chain_if_on)]  # None: chain off
CanComplete = require(Scope.complete)
IsAdmin = require(Scope.admin)


async def get_completer(
    request: Request,
    service: ServiceDep,
    settings: SettingsDep,
    request_id: RequestIdDep,
    caller: CallerDep,
    deadline_ms: DeadlineDep = None,
) -> Completer:
    return Completer(
        service,
        request,
        request_id or uuid.uuid4().hex,
        deadline_ms,
        caller,
        settings.request.stream_send_timeout_seconds,
    )


CompleterDep = Annotated[Completer, Depends(get_completer)]


# --- template labels (release flow) ---


async def get_template_labels(request: Request) -> TemplateLabels:
    return _runtime(request).template_labels


TemplateLabelsDep = Annotated[TemplateLabels, Depends(get_template_labels)]


# --- signed envelopes (issue 20) ---


async def get_signer(request: Request) -> Signer | None:
    return _runtime(request).signer


SignerDep = Annotated[Signer | None, Depends(get_signer)]


# --- the admin event log (issue 20) ---


async def get_admin_log(request: Request, caller: CallerDep, request_id: RequestIdDep) -> ActorLog:
    """The event log bound to this request's key, client address and user agent. The address
    is the socket's, or the one a trusted proxy forwarded (uvicorn's proxy_headers, trusting
    FORWARDED_ALLOW_IPS); a header from anyone else is not believed."""
    key_id = caller.key_id if caller is not None else None
    actor = Actor(
        kind="key" if key_id is not None else "anonymous",
        key_id=key_id,
        team=caller.team if caller is not None else None,
        remote_addr=request.client.host if request.client is not None else None,
        user_agent=request.headers.get("user-agent"),
        request_id=request_id,
    )
    return ActorLog(_runtime(request).admin_events, actor)


async def get_admin_events(request: Request) -> AdminEvents:
    return _runtime(request).admin_events


AdminLogDep = Annotated[ActorLog, Depends(get_admin_log)]
AdminEventsDep = Annotated[AdminEvents, Depends(get_admin_events)]
