"""An application's webhook configurations: created, listed, read, changed, deleted, their signing
secret rotated, a `webhook.test` event sent, their delivery log read and a delivery retried, with
the same ownership checks (`application_for`), URL checks (`_safe_url`) and rate limits for the
API's routes and the console's pages."""

from __future__ import annotations

import logging
import math
import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from payorch.engine.body_types import DEFAULT_EVENT_TYPES, EVENT_TYPES, TEST_EVENT_TYPE
from payorch.engine.payments.records import event_body, new_event_id
from payorch.http.auth import Principal, application_for, parse_id
from payorch.http.models import WebhookCreateRequest, WebhookUpdateRequest
from payorch.http.operations.pages import application_page
from payorch.http.services import Services
from payorch.jsonexact import dumps_exact
from payorch.outbound.attempt import AttemptResult, send_signed
from payorch.outbound.signing import key_fingerprint, new_signing_secret
from payorch.outbound.signing_secrets import signing_secrets
from payorch.outbound.ssrf import UnsafeWebhookUrl, check_webhook_url
from payorch.storage import webhooks as webhooks_store
from payorch.storage.webhooks import DeliveryView, WebhookConfig
from payorch.values.errors import FieldProblem, InvalidInput, NotFound
from payorch.values.pagination import PageRequest
from payorch.values.statuses import WebhookTestStatus

log = logging.getLogger("payorch.http.webhooks")


def _events(requested: list[str] | None) -> list[str]:
    if requested is None:
        return list(DEFAULT_EVENT_TYPES)
    unknown = sorted(set(requested) - set(EVENT_TYPES))
    if unknown:
        raise InvalidInput(
            "unknown event type",
            [
                FieldProblem(
                    "subscribedEvents", f"unknown: {', '.join(unknown)}; known: {', '.join(EVENT_TYPES)}"
                )
            ],
        )
    if not requested:
        raise InvalidInput(
            "no event type", [FieldProblem("subscribedEvents", "name at least one event type")]
        )
    return list(dict.fromkeys(requested))


async def _safe_url(services: Services, url: str) -> str:
    webhooks = services.context.settings.webhooks
    try:
        await check_webhook_url(
            url,
            allow_private_networks=webhooks.allow_private_networks,
            allow_loopback=webhooks.allow_loopback,
        )
    except UnsafeWebhookUrl as error:
        raise InvalidInput("webhook URL refused", [FieldProblem("url", str(error))]) from None
    return url


async def _config(services: Services, application_id: uuid.UUID, webhook_id: str) -> WebhookConfig:
    found = await services.context.db.autocommit(
        webhooks_store.get_webhook, application_id, parse_id(webhook_id, "webhook")
    )
    if found is None:
        raise NotFound("webhook configuration not found", missing="webhook configuration")
    return found


@dataclass(frozen=True)
class SentTestEvent:
    """A `webhook.test` event sent: to which configuration, when, and how the endpoint answered."""

    config: WebhookConfig  # as it was when the event was sent
    delivered_at: datetime
    result: AttemptResult


async def create_webhook(
    services: Services,
    principal: Principal,
    application_id: str,
    data: WebhookCreateRequest,
    *,
    is_active: bool = True,
) -> tuple[str, WebhookConfig]:
    """A new configuration of the application: its signing secret (for the caller to show this once)
    and the configuration as stored (the secret sealed); `LimitReached` when the application has
    `limits.webhooks_per_application` already. The API's configurations start active; the
    console may create one inactive, to test it before it receives events."""
    application = await application_for(principal, application_id)
    events = _events(data.subscribedEvents)
    url = await _safe_url(services, data.url)
    secret = new_signing_secret()
    created = await services.context.db.transaction(
        webhooks_store.create_webhook,
        application_id=application.id,
        url=url,
        subscribed_events=events,
        secret=services.context.secrets.seal(secret),
        key_fingerprint=key_fingerprint(secret),
        most=services.context.settings.limits.webhooks_per_application,
        is_active=is_active,
    )
    return secret, created


async def list_webhooks(
    services: Services, principal: Principal, application_id: str, page: PageRequest
) -> tuple[list[WebhookConfig], int]:
    """A page of the application's configurations, newest first, and how many there are."""
    return await application_page(services, principal, application_id, webhooks_store.list_webhooks, page)


async def read_webhook(
    services: Services, principal: Principal, application_id: str, webhook_id: str
) -> WebhookConfig:
    """One configuration of the application (`NotFound` when it has no such one)."""
    application = await application_for(principal, application_id)
    return await _config(services, application.id, webhook_id)


async def update_webhook(
    services: Services, principal: Principal, application_id: str, webhook_id: str, data: WebhookUpdateRequest
) -> WebhookConfig:
    """Change what `data` names: the URL (checked as on creation), the events, whether it is active."""
    application = await application_for(principal, application_id)
    config = await _config(services, application.id, webhook_id)
    changes: dict[str, Any] = {}
    if data.url is not None:
        changes["url"] = await _safe_url(services, data.url)
    if data.isActive is not None:
        changes["is_active"] = data.isActive
    if data.subscribedEvents is not None:
        changes["subscribed_events"] = _events(data.subscribedEvents)
    return await services.context.db.transaction(
        webhooks_store.update_webhook, application.id, config.id, changes, now=services.context.clock.now()
    )


async def delete_webhook(
    services: Services, principal: Principal, application_id: str, webhook_id: str
) -> None:
    """Delete the configuration: it leaves the lists and reads (`NotFound` from then on), receives
    no more events, and its PENDING deliveries become FAILED ("webhook configuration deleted")."""
    application = await application_for(principal, application_id)
    config = await _config(services, application.id, webhook_id)
    await services.context.db.transaction(
        webhooks_store.delete_webhook, application.id, config.id, now=services.context.clock.now()
    )


async def rotate_secret(
    services: Services, principal: Principal, application_id: str, webhook_id: str
) -> tuple[str, WebhookConfig]:
    """A new signing secret (for the caller to show this once) and the configuration after the
    rotation; the old secret keeps signing too for `webhooks.rotation_overlap_s`."""
    application = await application_for(principal, application_id)
    config = await _config(services, application.id, webhook_id)
    secret = new_signing_secret()
    rotated = await services.context.db.transaction(
        webhooks_store.rotate_secret,
        application.id,
        config.id,
        secret=services.context.secrets.seal(secret),
        key_fingerprint=key_fingerprint(secret),
        overlap_s=services.context.settings.webhooks.rotation_overlap_s,
        now=services.context.clock.now(),
    )
    return secret, rotated


async def send_test_event(
    services: Services, principal: Principal, application_id: str, webhook_id: str
) -> SentTestEvent:
    """Send a signed `webhook.test` event to the configuration's URL now (within the merchant's
    share of test sends), record whether it succeeded, and report the answer."""
    application = await application_for(principal, application_id)
    config = await _config(services, application.id, webhook_id)
    event_id = new_event_id()
    delivered_at = services.context.clock.now()
    body = event_body(event_id, TEST_EVENT_TYPE, delivered_at, application.id, {"webhookId": str(config.id)})
    secrets = signing_secrets(
        services.context.secrets,
        secret=config.secret,
        previous_secret=config.previous_secret,
        previous_secret_expires_at=config.previous_secret_expires_at,
        now=delivered_at,
    )
    webhooks = services.context.settings.webhooks
    timeout_s = webhooks.timeout_s
    with services.limits.test_send(principal.merchant_id, retry_after=math.ceil(timeout_s)):
        result = await send_signed(
            services.webhooks,
            url=config.url,
            secrets=secrets,
            fingerprint=config.key_fingerprint,
            message_id=event_id,
            body=dumps_exact(body).encode(),
            timeout_s=timeout_s,
            log_context={"webhookId": str(config.id), "eventId": event_id},
            clock=services.context.clock,
            allow_loopback=webhooks.allow_loopback,
        )
    status = WebhookTestStatus.SUCCEEDED if result.succeeded else WebhookTestStatus.FAILED
    await services.context.db.transaction(webhooks_store.record_test, config.id, delivered_at, status)
    # As a delivery attempt is logged (supervisors.webhook_attempts): why it failed, never the body.
    log.info(
        "webhook test event sent",
        extra={
            "webhookId": str(config.id),
            "eventId": event_id,
            "statusCode": result.status_code,
            "outcome": status,
            "error": result.error,
            "failureReason": result.failure_reason,
            "latencyMs": result.latency_ms,
        },
    )
    return SentTestEvent(config=config, delivered_at=delivered_at, result=result)


async def list_deliveries(
    services: Services, principal: Principal, application_id: str, webhook_id: str, page: PageRequest
) -> tuple[list[DeliveryView], int]:
    """A page of the configuration's delivery log, newest first, each delivery with its attempts."""
    application = await application_for(principal, application_id)
    config = await _config(services, application.id, webhook_id)
    # One snapshot: a delivery's attempt log never shows an attempt its status does not yet.
    async with services.limits.list_read(principal.merchant_id):
        return await services.context.db.snapshot(webhooks_store.list_deliveries, config.id, page)


async def retry_delivery(
    services: Services, principal: Principal, application_id: str, webhook_id: str, delivery_id: str
) -> None:
    """Make the delivery PENDING and due now, whatever became of it (FAILED, DELIVERED or PENDING)."""
    application = await application_for(principal, application_id)
    config = await _config(services, application.id, webhook_id)
    await services.context.db.transaction(
        webhooks_store.retry_delivery,
        config.id,
        parse_id(delivery_id, "delivery"),
        now=services.context.clock.now(),
    )
