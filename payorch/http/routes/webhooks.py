"""Webhook configurations of an application: where payorch sends its signed events."""

from __future__ import annotations

import logging
import math
import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from quart import Blueprint
from quart_schema import document_response, security_scheme, tag_blueprint

from payorch.engine.body_types import (
    DEFAULT_EVENT_TYPES,
    EVENT_TYPES,
    TEST_EVENT_TYPE,
    one_of,
)
from payorch.engine.payments.records import event_body, new_event_id
from payorch.http import openapi as api
from payorch.http import representations as bodies
from payorch.http.auth import Accept, Principal, application_for, authenticated, parse_id
from payorch.http.models import PageQuery, WebhookCreateRequest, WebhookUpdateRequest
from payorch.http.services import services
from payorch.http.validation import validate_querystring, validate_request
from payorch.jsonexact import dumps_exact
from payorch.outbound.attempt import AttemptResult, send_signed
from payorch.outbound.signing import key_fingerprint, new_signing_secret
from payorch.outbound.signing_secrets import signing_secrets
from payorch.outbound.ssrf import UnsafeWebhookUrl, check_webhook_url
from payorch.storage import webhooks as webhooks_store
from payorch.storage.webhooks import DeliveryView, WebhookConfig
from payorch.values.errors import FieldProblem, InvalidInput, NotFound
from payorch.values.pagination import Page, PageRequest, envelope
from payorch.values.statuses import DeliveryStatus, WebhookTestStatus
from payorch.values.timefmt import iso

log = logging.getLogger("payorch.http.webhooks")

blueprint = Blueprint("webhooks", __name__, url_prefix="/api/v1/applications/<application_id>/webhooks")
tag_blueprint(blueprint, ["Webhooks"])


def webhook_body(config: WebhookConfig) -> bodies.WebhookConfig:
    return {
        "id": str(config.id),
        "url": config.url,
        "isActive": config.is_active,
        "keyFingerprint": config.key_fingerprint,
        "subscribedEvents": [one_of(event, EVENT_TYPES) for event in config.subscribed_events],
        "lastTestAt": iso(config.last_test_at),
        "lastTestStatus": config.last_test_status,
        "createdAt": iso(config.created_at),
        "updatedAt": iso(config.updated_at),
    }


def delivery_body(delivery: DeliveryView) -> bodies.Delivery:
    return {
        "id": str(delivery.id),
        "eventId": delivery.event_id,
        "eventType": delivery.event_type,
        "status": delivery.status,
        "attempts": delivery.attempts,
        "nextAttemptAt": iso(delivery.next_attempt_at),
        "lastAttemptAt": iso(delivery.last_attempt_at),
        "lastStatusCode": delivery.last_status_code,
        "lastError": delivery.last_error,
        "deliveredAt": iso(delivery.delivered_at),
        "createdAt": iso(delivery.created_at),
        "attemptLog": [
            {
                "attemptedAt": iso(item["attempted_at"]),
                "httpStatusCode": item["status_code"],
                "error": item["error"],
                "latencyMs": item["latency_ms"],
            }
            for item in delivery.attempt_log
        ],
    }


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


async def _safe_url(url: str) -> str:
    webhooks = services().context.settings.webhooks
    try:
        await check_webhook_url(
            url,
            allow_private_networks=webhooks.allow_private_networks,
            allow_loopback=webhooks.allow_loopback,
        )
    except UnsafeWebhookUrl as error:
        raise InvalidInput("webhook URL refused", [FieldProblem("url", str(error))]) from None
    return url


async def _config(application_id: uuid.UUID, webhook_id: str) -> WebhookConfig:
    found = await services().context.db.autocommit(
        webhooks_store.get_webhook, application_id, parse_id(webhook_id, "webhook")
    )
    if found is None:
        raise NotFound("webhook configuration not found", missing="webhook configuration")
    return found


# The operations behind the routes below, which the console's pages call too: one path to the data,
# with the same ownership checks (`application_for`), URL checks (`_safe_url`) and rate limits.


@dataclass(frozen=True)
class SentTestEvent:
    """A `webhook.test` event sent: to which configuration, when, and how the endpoint answered."""

    config: WebhookConfig  # as it was when the event was sent
    delivered_at: datetime
    result: AttemptResult


async def create_webhook_of(
    principal: Principal, application_id: str, data: WebhookCreateRequest, *, is_active: bool = True
) -> tuple[str, WebhookConfig]:
    """A new configuration of the application: its signing secret (for the caller to show this once)
    and the configuration as stored (the secret sealed); `LimitReached` when the application has
    `limits.webhooks_per_application` already. The API's configurations start active; the
    console may create one inactive, to test it before it receives events."""
    application = await application_for(principal, application_id)
    events = _events(data.subscribedEvents)
    url = await _safe_url(data.url)
    secret = new_signing_secret()
    created = await services().context.db.transaction(
        webhooks_store.create_webhook,
        application_id=application.id,
        url=url,
        subscribed_events=events,
        secret=services().context.secrets.seal(secret),
        key_fingerprint=key_fingerprint(secret),
        most=services().context.settings.limits.webhooks_per_application,
        is_active=is_active,
    )
    return secret, created


async def webhooks_of(
    principal: Principal, application_id: str, page: PageRequest
) -> tuple[list[WebhookConfig], int]:
    """A page of the application's configurations, newest first, and how many there are."""
    application = await application_for(principal, application_id)
    async with services().limits.list_read(principal.merchant_id):
        return await services().context.db.autocommit(webhooks_store.list_webhooks, application.id, page)


async def webhook_of(principal: Principal, application_id: str, webhook_id: str) -> WebhookConfig:
    """One configuration of the application (`NotFound` when it has no such one)."""
    application = await application_for(principal, application_id)
    return await _config(application.id, webhook_id)


async def update_webhook_of(
    principal: Principal, application_id: str, webhook_id: str, data: WebhookUpdateRequest
) -> WebhookConfig:
    """Change what `data` names: the URL (checked as on creation), the events, whether it is active."""
    application = await application_for(principal, application_id)
    config = await _config(application.id, webhook_id)
    changes: dict[str, Any] = {}
    if data.url is not None:
        changes["url"] = await _safe_url(data.url)
    if data.isActive is not None:
        changes["is_active"] = data.isActive
    if data.subscribedEvents is not None:
        changes["subscribed_events"] = _events(data.subscribedEvents)
    return await services().context.db.transaction(
        webhooks_store.update_webhook, application.id, config.id, changes, now=services().context.clock.now()
    )


async def delete_webhook_of(principal: Principal, application_id: str, webhook_id: str) -> None:
    """Delete the configuration: it leaves the lists and reads (`NotFound` from then on), receives
    no more events, and its PENDING deliveries become FAILED ("webhook configuration deleted")."""
    application = await application_for(principal, application_id)
    config = await _config(application.id, webhook_id)
    await services().context.db.transaction(
        webhooks_store.delete_webhook, application.id, config.id, now=services().context.clock.now()
    )


async def rotate_secret_of(
    principal: Principal, application_id: str, webhook_id: str
) -> tuple[str, WebhookConfig]:
    """A new signing secret (for the caller to show this once) and the configuration after the
    rotation; the old secret keeps signing too for `webhooks.rotation_overlap_s`."""
    application = await application_for(principal, application_id)
    config = await _config(application.id, webhook_id)
    secret = new_signing_secret()
    rotated = await services().context.db.transaction(
        webhooks_store.rotate_secret,
        application.id,
        config.id,
        secret=services().context.secrets.seal(secret),
        key_fingerprint=key_fingerprint(secret),
        overlap_s=services().context.settings.webhooks.rotation_overlap_s,
        now=services().context.clock.now(),
    )
    return secret, rotated


async def send_test_event_of(principal: Principal, application_id: str, webhook_id: str) -> SentTestEvent:
    """Send a signed `webhook.test` event to the configuration's URL now (within the merchant's
    share of test sends), record whether it succeeded, and report the answer."""
    application = await application_for(principal, application_id)
    config = await _config(application.id, webhook_id)
    event_id = new_event_id()
    delivered_at = services().context.clock.now()
    body = event_body(event_id, TEST_EVENT_TYPE, delivered_at, application.id, {"webhookId": str(config.id)})
    secrets = signing_secrets(
        services().context.secrets,
        secret=config.secret,
        previous_secret=config.previous_secret,
        previous_secret_expires_at=config.previous_secret_expires_at,
        now=delivered_at,
    )
    webhooks = services().context.settings.webhooks
    timeout_s = webhooks.timeout_s
    with services().limits.test_send(principal.merchant_id, retry_after=math.ceil(timeout_s)):
        result = await send_signed(
            services().webhooks,
            url=config.url,
            secrets=secrets,
            fingerprint=config.key_fingerprint,
            message_id=event_id,
            body=dumps_exact(body).encode(),
            timeout_s=timeout_s,
            log_context={"webhookId": str(config.id), "eventId": event_id},
            clock=services().context.clock,
            allow_loopback=webhooks.allow_loopback,
        )
    status = WebhookTestStatus.SUCCEEDED if result.succeeded else WebhookTestStatus.FAILED
    await services().context.db.transaction(webhooks_store.record_test, config.id, delivered_at, status)
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


async def deliveries_of(
    principal: Principal, application_id: str, webhook_id: str, page: PageRequest
) -> tuple[list[DeliveryView], int]:
    """A page of the configuration's delivery log, newest first, each delivery with its attempts."""
    application = await application_for(principal, application_id)
    config = await _config(application.id, webhook_id)
    # One snapshot: a delivery's attempt log never shows an attempt its status does not yet.
    async with services().limits.list_read(principal.merchant_id):
        return await services().context.db.snapshot(webhooks_store.list_deliveries, config.id, page)


async def retry_delivery_of(
    principal: Principal, application_id: str, webhook_id: str, delivery_id: str
) -> None:
    """Make the delivery PENDING and due now, whatever became of it (FAILED, DELIVERED or PENDING)."""
    application = await application_for(principal, application_id)
    config = await _config(application.id, webhook_id)
    await services().context.db.transaction(
        webhooks_store.retry_delivery,
        config.id,
        parse_id(delivery_id, "delivery"),
        now=services().context.clock.now(),
    )


@blueprint.post("")
@security_scheme(api.JWT)
@document_response(bodies.WebhookConfigCreated, 201)
@api.errors(400, 401, 403, 404, 409, 413, 429, 500)
@authenticated(Accept.JWT)
@validate_request(WebhookCreateRequest)
async def create_webhook(
    application_id: str, data: WebhookCreateRequest, principal: Principal
) -> tuple[bodies.WebhookConfigCreated, int]:
    """A new configuration; its `signingSecret` is shown in this answer only."""
    secret, created = await create_webhook_of(principal, application_id, data)
    return {**webhook_body(created), "signingSecret": secret}, 201


@blueprint.get("")
@security_scheme(api.JWT)
@document_response(Page[bodies.WebhookConfig], 200)
@api.errors(400, 401, 403, 404, 429, 500)
@authenticated(Accept.JWT)
@validate_querystring(PageQuery)
async def list_webhooks(
    application_id: str, query_args: PageQuery, principal: Principal
) -> Page[bodies.WebhookConfig]:
    """The application's webhook configurations (without their signing secrets)."""
    page = query_args.page_request
    found, total = await webhooks_of(principal, application_id, page)
    return envelope([webhook_body(item) for item in found], page, total)


@blueprint.get("/<webhook_id>")
@security_scheme(api.JWT)
@document_response(bodies.WebhookConfig, 200)
@api.errors(401, 403, 404, 429, 500)
@authenticated(Accept.JWT)
async def get_webhook(application_id: str, webhook_id: str, principal: Principal) -> bodies.WebhookConfig:
    """A webhook configuration (without its signing secret)."""
    return webhook_body(await webhook_of(principal, application_id, webhook_id))


@blueprint.patch("/<webhook_id>")
@security_scheme(api.JWT)
@document_response(bodies.WebhookConfig, 200)
@api.errors(400, 401, 403, 404, 413, 429, 500)
@authenticated(Accept.JWT)
@validate_request(WebhookUpdateRequest)
async def update_webhook(
    application_id: str, webhook_id: str, data: WebhookUpdateRequest, principal: Principal
) -> bodies.WebhookConfig:
    """Change the URL, the subscribed events or whether the configuration is active."""
    return webhook_body(await update_webhook_of(principal, application_id, webhook_id, data))


@blueprint.delete("/<webhook_id>")
@security_scheme(api.JWT)
@document_response(bodies.Empty, 200)
@api.errors(401, 403, 404, 429, 500)
@authenticated(Accept.JWT)
async def delete_webhook(application_id: str, webhook_id: str, principal: Principal) -> bodies.Empty:
    """Delete a webhook configuration: it receives nothing more and leaves the lists."""
    await delete_webhook_of(principal, application_id, webhook_id)
    return {}


@blueprint.patch("/<webhook_id>/secret")
@security_scheme(api.JWT)
@document_response(bodies.SecretRotated, 200)
@api.errors(401, 403, 404, 429, 500)
@authenticated(Accept.JWT)
async def rotate_secret(application_id: str, webhook_id: str, principal: Principal) -> bodies.SecretRotated:
    """A new signing secret, shown this once. The old one keeps signing too for
    `webhooks.rotation_overlap_s`, so receivers can switch without losing a delivery."""
    secret, rotated = await rotate_secret_of(principal, application_id, webhook_id)
    return {"keyFingerprint": rotated.key_fingerprint, "signingSecret": secret}


@blueprint.post("/<webhook_id>/test")
@security_scheme(api.JWT)
@document_response(bodies.WebhookTestResult, 200)
@api.errors(401, 403, 404, 429, 500)
@authenticated(Accept.JWT)
async def test_webhook(
    application_id: str, webhook_id: str, principal: Principal
) -> bodies.WebhookTestResult:
    """Send a signed `webhook.test` event now and report how the endpoint answered, or, in `error`,
    why it gave no answer (DNS, refused, TLS, timeout...). It goes out as a delivery does: the same
    client and checks, signed with both secrets during a rotation's overlap, at most the first 1024
    bytes of the answer read."""
    sent = await send_test_event_of(principal, application_id, webhook_id)
    return {
        "success": sent.result.succeeded,
        "httpStatusCode": sent.result.status_code,
        "responseBody": sent.result.response_excerpt,
        "latencyMs": sent.result.latency_ms,
        "deliveredAt": iso(sent.delivered_at),
        "error": sent.result.error,
    }


@blueprint.get("/<webhook_id>/deliveries")
@security_scheme(api.JWT)
@document_response(Page[bodies.Delivery], 200)
@api.errors(400, 401, 403, 404, 429, 500)
@authenticated(Accept.JWT)
@validate_querystring(PageQuery)
async def list_deliveries(
    application_id: str, webhook_id: str, query_args: PageQuery, principal: Principal
) -> Page[bodies.Delivery]:
    """The delivery log: each event sent to this endpoint, its status and every attempt."""
    page = query_args.page_request
    found, total = await deliveries_of(principal, application_id, webhook_id, page)
    return envelope([delivery_body(item) for item in found], page, total)


@blueprint.post("/<webhook_id>/deliveries/<delivery_id>/retry")
@security_scheme(api.JWT)
@document_response(bodies.DeliveryRetry, 202)
@api.errors(401, 403, 404, 429, 500)
@authenticated(Accept.JWT)
async def retry_delivery(
    application_id: str, webhook_id: str, delivery_id: str, principal: Principal
) -> tuple[bodies.DeliveryRetry, int]:
    """Send a delivery again now, for example one that FAILED after its last scheduled attempt."""
    await retry_delivery_of(principal, application_id, webhook_id, delivery_id)
    return {"id": delivery_id, "status": DeliveryStatus.PENDING}, 202
