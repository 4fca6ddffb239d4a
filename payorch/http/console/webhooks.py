"""An application's webhook configurations, their tests and their delivery logs.

    GET  /console/applications/<id>/webhooks                    the configurations; POST creates one
    GET  /console/applications/<id>/webhooks/<webhook>          one, and its delivery log
    GET  /console/applications/<id>/webhooks/<webhook>/deliveries/<delivery>
                                                                one delivery: the body sent, why it
                                                                waits, each attempt and its answer
    POST /console/applications/<id>/webhooks/<webhook>          change its URL and events (the edit form)
    POST /console/applications/<id>/webhooks/<webhook>/delete   ask to confirm; with `confirm=yes`, delete it
    POST /console/applications/<id>/webhooks/<webhook>/status   activate or deactivate (field `active`)
    POST /console/applications/<id>/webhooks/<webhook>/secret   a new signing secret, shown on the answer only
    POST /console/applications/<id>/webhooks/<webhook>/test     send a `webhook.test` event, show the answer
    POST /console/applications/<id>/webhooks/<webhook>/deliveries/<delivery>/retry
                                                                send it again now; back to the log,
                                                                or to the delivery's page (`back`)

Every action calls the operation the API's route calls (`operations/webhooks.py`), so ownership, URL
checks (https only, no private addresses unless allowed), the merchant's share of test sends and the
retry rules are the API's. A signing secret is shown on the answer to its creation or rotation and
never again: nothing keeps it to show later. What a receiver answered (its headers, its body's
first bytes) is shown as text, escaped, never as markup.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from quart import Response, url_for
from werkzeug.datastructures import MultiDict

from payorch.engine.body_types import DEFAULT_EVENT_TYPES, EVENT_TYPES
from payorch.http.auth import application_for
from payorch.http.console.display import readable_time
from payorch.http.console.guide import progress_of
from payorch.http.console.kit import (
    Session,
    action,
    application_section,
    blueprint,
    done_notice,
    field_errors,
    listing,
    page,
    render_page,
    see_other,
    text_fields,
    true_or_false,
    validated,
)
from payorch.http.models import WebhookCreateRequest, WebhookUpdateRequest
from payorch.http.operations import deliveries
from payorch.http.operations import webhooks as operations
from payorch.http.services import services
from payorch.outbound.attempt import request_body
from payorch.storage.webhooks import DeliveryView
from payorch.values import errors as domain

application_section("Webhooks", "webhooks")

EVENTS_FIELD = "subscribedEvents"
# What the form posted just before did, shown after its redirect (`?done=...`).
DONE = {
    "updated": "Saved: payorch now sends the events ticked below to this URL.",
    "deleted": "The webhook configuration was deleted: it receives no more events.",
    "resent": "Queued: payorch sends this delivery again as soon as it can (refresh to see the attempt).",
}
# The `back` field of a delivery's resend form that leads back to the delivery's page.
BACK_TO_DELIVERY = "delivery"


# --- The configurations ------------------------------------------------------------------------


async def _webhooks_page(
    session: Session,
    application_id: str,
    status: int,
    *,
    form: Mapping[str, Any] | None = None,
    errors: dict[str, str] | None = None,
) -> tuple[str, int]:
    application = await application_for(session.principal, application_id)
    return await render_page(
        "console/webhooks.html",
        session,
        status,
        title="Webhooks",
        application=application,
        listing=await listing(
            lambda page: operations.list_webhooks(services(), session.principal, application_id, page)
        ),
        event_types=EVENT_TYPES,
        form={"url": "", "events": list(DEFAULT_EVENT_TYPES), "active": True, **(form or {})},
        errors=errors or {},
        notice=done_notice(DONE, status),
    )


@blueprint.get("/applications/<application_id>/webhooks")
@page
async def webhooks(application_id: str, session: Session) -> tuple[str, int]:
    return await _webhooks_page(session, application_id, 200)


@blueprint.post("/applications/<application_id>/webhooks")
@action
async def create_webhook(application_id: str, session: Session, form: MultiDict[str, str]) -> Any:
    """Create a configuration with the API's validation (`WebhookCreateRequest`, then its event and
    URL checks); the answer shows the signing secret, this once (no redirect)."""
    events = form.getlist(EVENTS_FIELD)
    active = form.get("active") == "true"
    shown = {"url": form.get("url", ""), "events": events, "active": active}
    try:
        fields = text_fields(form, ("url",))
        data = validated(WebhookCreateRequest, {"url": fields["url"], EVENTS_FIELD: events})
        secret, created = await operations.create_webhook(
            services(), session.principal, application_id, data, is_active=active
        )
    except domain.InvalidInput as error:
        return await _webhooks_page(session, application_id, 400, form=shown, errors=field_errors(error))
    return await _secret_page(session, application_id, created.id, secret, created.key_fingerprint, 201)


async def _secret_page(
    session: Session,
    application_id: str,
    webhook_id: uuid.UUID,
    secret: str,
    fingerprint: str,
    status: int,
    *,
    previous_expires_at: datetime | None = None,
) -> tuple[str, int]:
    application = await application_for(session.principal, application_id)
    return await render_page(
        "console/webhook_secret.html",
        session,
        status,
        title="New signing secret" if status == 201 else "Signing secret rotated",
        application=application,
        webhook_id=webhook_id,
        secret=secret,
        fingerprint=fingerprint,
        created=status == 201,
        previous_expires_at=previous_expires_at,
        # After a creation, the step that follows it (`guide.py`).
        progress=await progress_of(session.principal, application_id) if status == 201 else None,
    )


# --- One configuration and its delivery log -----------------------------------------------------


async def _webhook_page(
    session: Session,
    application_id: str,
    webhook_id: str,
    status: int,
    *,
    form: Mapping[str, Any] | None = None,
    errors: dict[str, str] | None = None,
) -> tuple[str, int]:
    application = await application_for(session.principal, application_id)
    config = await operations.read_webhook(services(), session.principal, application_id, webhook_id)
    listing_of_deliveries = await listing(
        lambda page: operations.list_deliveries(
            services(), session.principal, application_id, webhook_id, page
        )
    )
    return await render_page(
        "console/webhook.html",
        session,
        status,
        title="Webhook configuration",
        application=application,
        config=config,
        listing=listing_of_deliveries,
        waits={item.id: _wait_words(item) for item in listing_of_deliveries.items},
        event_types=EVENT_TYPES,
        form={"url": config.url, "events": config.subscribed_events, **(form or {})},
        errors=errors or {},
        notice=done_notice(DONE, status),
    )


@blueprint.get("/applications/<application_id>/webhooks/<webhook_id>")
@page
async def webhook(application_id: str, webhook_id: str, session: Session) -> tuple[str, int]:
    return await _webhook_page(session, application_id, webhook_id, 200)


@blueprint.post("/applications/<application_id>/webhooks/<webhook_id>")
@action
async def update_webhook(
    application_id: str, webhook_id: str, session: Session, form: MultiDict[str, str]
) -> Any:
    """Change the URL and the events with the API's update (`WebhookUpdateRequest`, then its URL and
    event checks); a refusal shows the form again (400) and changes nothing."""
    await operations.read_webhook(
        services(), session.principal, application_id, webhook_id
    )  # another's: 404 first
    events = form.getlist(EVENTS_FIELD)
    shown = {"url": form.get("url", ""), "events": events}
    try:
        fields = text_fields(form, ("url",))
        data = validated(WebhookUpdateRequest, {"url": fields["url"], EVENTS_FIELD: events})
        await operations.update_webhook(services(), session.principal, application_id, webhook_id, data)
    except domain.InvalidInput as error:
        return await _webhook_page(
            session, application_id, webhook_id, 400, form=shown, errors=field_errors(error)
        )
    return see_other(
        url_for("console.webhook", application_id=application_id, webhook_id=webhook_id, done="updated")
    )


@blueprint.post("/applications/<application_id>/webhooks/<webhook_id>/delete")
@action
async def delete_webhook(
    application_id: str, webhook_id: str, session: Session, form: MultiDict[str, str]
) -> Any:
    """Without `confirm=yes`: the page asking to confirm, and nothing deleted. With it: the API's
    delete, then the list."""
    if form.get("confirm") == "yes":
        await operations.delete_webhook(services(), session.principal, application_id, webhook_id)
        return see_other(url_for("console.webhooks", application_id=application_id, done="deleted"))
    application = await application_for(session.principal, application_id)
    config = await operations.read_webhook(services(), session.principal, application_id, webhook_id)
    return await render_page(
        "console/webhook_delete.html",
        session,
        title="Delete this webhook configuration?",
        application=application,
        config=config,
    )


@blueprint.post("/applications/<application_id>/webhooks/<webhook_id>/status")
@action
async def webhook_status(
    application_id: str, webhook_id: str, session: Session, form: MultiDict[str, str]
) -> Response:
    active = true_or_false(form, "active")
    await operations.update_webhook(
        services(), session.principal, application_id, webhook_id, WebhookUpdateRequest(isActive=active)
    )
    return see_other(url_for("console.webhook", application_id=application_id, webhook_id=webhook_id))


@blueprint.post("/applications/<application_id>/webhooks/<webhook_id>/secret")
@action
async def rotate_webhook_secret(
    application_id: str, webhook_id: str, session: Session, form: MultiDict[str, str]
) -> tuple[str, int]:
    """A new signing secret, shown on this answer only; the old one keeps signing for the overlap."""
    secret, rotated = await operations.rotate_secret(
        services(), session.principal, application_id, webhook_id
    )
    return await _secret_page(
        session,
        application_id,
        rotated.id,
        secret,
        rotated.key_fingerprint,
        200,
        previous_expires_at=rotated.previous_secret_expires_at,
    )


@blueprint.post("/applications/<application_id>/webhooks/<webhook_id>/test")
@action
async def send_test_event(
    application_id: str, webhook_id: str, session: Session, form: MultiDict[str, str]
) -> tuple[str, int]:
    """Send a `webhook.test` event now and show how the endpoint answered."""
    sent = await operations.send_test_event(services(), session.principal, application_id, webhook_id)
    return await render_page(
        "console/webhook_test.html",
        session,
        title="Test event sent",
        application=await application_for(session.principal, application_id),
        config=sent.config,
        sent=sent,
    )


@blueprint.post("/applications/<application_id>/webhooks/<webhook_id>/deliveries/<delivery_id>/retry")
@action
async def retry_webhook_delivery(
    application_id: str, webhook_id: str, delivery_id: str, session: Session, form: MultiDict[str, str]
) -> Response:
    """Send the delivery again now (PENDING and due), as the API's retry does; back to the log, or to
    the delivery's page when the form came from there (`back=delivery`)."""
    await operations.retry_delivery(services(), session.principal, application_id, webhook_id, delivery_id)
    if form.get("back") == BACK_TO_DELIVERY:
        return see_other(
            url_for(
                "console.webhook_delivery",
                application_id=application_id,
                webhook_id=webhook_id,
                delivery_id=delivery_id,
                done="resent",
            )
        )
    back = form.get("page", "")
    arguments: dict[str, Any] = {"application_id": application_id, "webhook_id": webhook_id}
    if back.isascii() and back.isdigit() and len(back) <= 9 and int(back) > 1:
        arguments["page"] = int(back)
    return see_other(url_for("console.webhook", **arguments))


def _wait_words(delivery: DeliveryView) -> str | None:
    """Why the delivery waits, in words (None: it does not), times as the console writes them."""
    waits = deliveries.waiting_now(services(), delivery)
    return None if waits is None else waits.words(readable_time)


@blueprint.get("/applications/<application_id>/webhooks/<webhook_id>/deliveries/<delivery_id>")
@page
async def webhook_delivery(
    application_id: str, webhook_id: str, delivery_id: str, session: Session
) -> tuple[str, int]:
    """One delivery: the event's body sent, why it waits, each attempt with the receiver's status,
    headers and body excerpt (or why there was no answer), and a button to send it again."""
    application = await application_for(session.principal, application_id)
    found = await deliveries.read_delivery(
        services(), session.principal, application_id, webhook_id, delivery_id
    )
    waits = deliveries.waiting_now(services(), found.delivery)
    return await render_page(
        "console/webhook_delivery.html",
        session,
        title=f"Delivery of {found.delivery.event_type}",
        application=application,
        config=await operations.read_webhook(services(), session.principal, application_id, webhook_id),
        found=found,
        delivery=found.delivery,
        waits=waits,
        wait_words=None if waits is None else waits.words(readable_time),
        request_body=request_body(found.payload).decode(),
        retention_days=services().context.settings.webhooks.attempt_details_retention_days,
        back=BACK_TO_DELIVERY,
        notice=done_notice(DONE),
    )
