"""Webhook configurations of an application: where payorch sends its signed events."""

from __future__ import annotations

from quart import Blueprint
from quart_schema import document_response, security_scheme, tag_blueprint

from payorch.engine.body_types import EVENT_TYPES, one_of
from payorch.http import openapi as api
from payorch.http import representations as bodies
from payorch.http.auth import Accept, Principal, authenticated
from payorch.http.models import PageQuery, WebhookCreateRequest, WebhookUpdateRequest
from payorch.http.operations import deliveries, webhooks
from payorch.http.operations.deliveries import Waiting, waiting_now
from payorch.http.services import services
from payorch.http.validation import validate_querystring, validate_request
from payorch.outbound.attempt import request_body
from payorch.storage.delivery_details import DeliveryDetails
from payorch.storage.webhooks import DeliveryView, WebhookConfig
from payorch.values.pagination import Page, envelope
from payorch.values.statuses import DeliveryStatus
from payorch.values.timefmt import iso

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


def delivery_state(delivery: DeliveryView, waits: Waiting | None) -> bodies.DeliveryState:
    """What every delivery record says; `waits`: why it waits, if it does (`deliveries.waiting`)."""
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
        "waitsForEventId": delivery.waits_for_event_id,
        "waitsForDeliveryId": None
        if delivery.waits_for_delivery_id is None
        else str(delivery.waits_for_delivery_id),
        "waitReason": None if waits is None else waits.words(iso),
    }


def delivery_body(delivery: DeliveryView, waits: Waiting | None) -> bodies.Delivery:
    return {
        **delivery_state(delivery, waits),
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


def _headers(pairs: list[tuple[str, str]] | None) -> list[bodies.HeaderField] | None:
    return None if pairs is None else [{"name": name, "value": value} for name, value in pairs]


def delivery_details_body(found: DeliveryDetails, waits: Waiting | None) -> bodies.DeliveryDetails:
    return {
        **delivery_state(found.delivery, waits),
        "webhookId": str(found.webhook_id),
        "sessionId": None if found.session_id is None else str(found.session_id),
        "requestBody": request_body(found.payload).decode(),
        "attemptLog": [
            {
                "number": attempt.number,
                "attemptedAt": iso(attempt.attempted_at),
                "httpStatusCode": attempt.status_code,
                "error": attempt.error,
                "latencyMs": attempt.latency_ms,
                "requestHeaders": _headers(attempt.request_headers),
                "responseHeaders": _headers(attempt.response_headers),
                "responseBody": attempt.response_body,
                "detailsRemovedAt": iso(attempt.details_removed_at),
            }
            for attempt in found.attempts
        ],
        "olderAttempts": found.attempts_recorded - len(found.attempts),
    }


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
    secret, created = await webhooks.create_webhook(services(), principal, application_id, data)
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
    found, total = await webhooks.list_webhooks(services(), principal, application_id, page)
    return envelope([webhook_body(item) for item in found], page, total)


@blueprint.get("/<webhook_id>")
@security_scheme(api.JWT)
@document_response(bodies.WebhookConfig, 200)
@api.errors(401, 403, 404, 429, 500)
@authenticated(Accept.JWT)
async def get_webhook(application_id: str, webhook_id: str, principal: Principal) -> bodies.WebhookConfig:
    """A webhook configuration (without its signing secret)."""
    return webhook_body(await webhooks.read_webhook(services(), principal, application_id, webhook_id))


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
    return webhook_body(
        await webhooks.update_webhook(services(), principal, application_id, webhook_id, data)
    )


@blueprint.delete("/<webhook_id>")
@security_scheme(api.JWT)
@document_response(bodies.Empty, 200)
@api.errors(401, 403, 404, 429, 500)
@authenticated(Accept.JWT)
async def delete_webhook(application_id: str, webhook_id: str, principal: Principal) -> bodies.Empty:
    """Delete a webhook configuration: it receives nothing more and leaves the lists."""
    await webhooks.delete_webhook(services(), principal, application_id, webhook_id)
    return {}


@blueprint.patch("/<webhook_id>/secret")
@security_scheme(api.JWT)
@document_response(bodies.SecretRotated, 200)
@api.errors(401, 403, 404, 429, 500)
@authenticated(Accept.JWT)
async def rotate_secret(application_id: str, webhook_id: str, principal: Principal) -> bodies.SecretRotated:
    """A new signing secret, shown this once. The old one keeps signing too for
    `webhooks.rotation_overlap_s`, so receivers can switch without losing a delivery."""
    secret, rotated = await webhooks.rotate_secret(services(), principal, application_id, webhook_id)
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
    client and checks, signed with both secrets during a rotation's overlap, at most the first 4096
    bytes of the answer read."""
    sent = await webhooks.send_test_event(services(), principal, application_id, webhook_id)
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
    running = services()
    found, total = await webhooks.list_deliveries(running, principal, application_id, webhook_id, page)
    return envelope([delivery_body(item, waiting_now(running, item)) for item in found], page, total)


@blueprint.get("/<webhook_id>/deliveries/<delivery_id>")
@security_scheme(api.JWT)
@document_response(bodies.DeliveryDetails, 200)
@api.errors(401, 403, 404, 429, 500)
@authenticated(Accept.JWT)
async def get_delivery(
    application_id: str, webhook_id: str, delivery_id: str, principal: Principal
) -> bodies.DeliveryDetails:
    """One delivery in detail: the body every attempt sent, why it waits, and its latest attempts
    with the headers sent, the receiver's status, headers and the first 4096 bytes of its body (or
    why there was no answer). Headers and body are kept `webhooks.attempt_details_retention_days`."""
    running = services()
    found = await deliveries.read_delivery(running, principal, application_id, webhook_id, delivery_id)
    return delivery_details_body(found, waiting_now(running, found.delivery))


@blueprint.post("/<webhook_id>/deliveries/<delivery_id>/retry")
@security_scheme(api.JWT)
@document_response(bodies.DeliveryRetry, 202)
@api.errors(401, 403, 404, 429, 500)
@authenticated(Accept.JWT)
async def retry_delivery(
    application_id: str, webhook_id: str, delivery_id: str, principal: Principal
) -> tuple[bodies.DeliveryRetry, int]:
    """Send a delivery again now, for example one that FAILED after its last scheduled attempt, or
    one DELIVERED that the receiver lost: one more attempt, as soon as the delivery supervisor has a
    slot (a PENDING delivery of the same session's earlier event to this endpoint still goes first)."""
    await webhooks.retry_delivery(services(), principal, application_id, webhook_id, delivery_id)
    return {"id": delivery_id, "status": DeliveryStatus.PENDING}, 202
