"""Webhook delivery to a real HTTPS receiver: signed, retried, ordered per session, never lost."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import datetime
from decimal import Decimal
from typing import Any
from urllib.parse import urlsplit

import pytest
import standardwebhooks

from payorch.config import Settings
from payorch.storage.database import Connection, Database
from tests import webhook_receiver as receiving
from tests.clock import ShiftedClock
from tests.helpers import Client, Shop, create_session, eventually, new_shop, post_json
from tests.webhook_receiver import ReceivedRequest, WebhookReceiver, assert_signed_during_overlap

webhook_receiver = receiving.webhook_receiver


@pytest.fixture
def settings(settings: Settings, webhook_receiver: WebhookReceiver) -> Settings:
    """The receiver's CA trusted, and a short retry schedule: 4 attempts 0.2 s apart."""
    return settings.model_copy(
        update={
            "webhooks": settings.webhooks.model_copy(
                update={
                    "ca_bundle": webhook_receiver.ca_path,
                    "retry_schedule_s": [0, 0.2, 0.2, 0.2],
                    "timeout_s": 5,
                }
            )
        }
    )


@pytest.fixture
async def shop(client: Client, db: Database, settings: Settings) -> Shop:
    return await new_shop(client, db, settings)


async def subscribe(
    client: Client, shop: Shop, receiver: WebhookReceiver, events: list[str] | None = None, path: str = ""
) -> dict[str, Any]:
    body: dict[str, Any] = {"url": receiver.url + path}
    if events is not None:
        body["subscribedEvents"] = events
    response = await client.post(
        f"/api/v1/applications/{shop.application_id}/webhooks", json=body, headers=shop.merchant.headers
    )
    assert response.status_code == 201, await response.get_data(as_text=True)
    config: dict[str, Any] = await response.get_json()
    receiver.accept_secret(config["signingSecret"])
    return config


async def pay(client: Client, shop: Shop, key: str = "k") -> str:
    created = await (await create_session(client, shop, key)).get_json()
    await client.post(urlsplit(created["checkoutUrl"]).path, form={"card_number": "4242424242424242"})
    return str(created["sessionId"])


async def all_that_will_be_sent(db: Database, session_id: str) -> list[tuple[str, str]] | None:
    """Every delivery there will ever be of the session's events, (event type, status), once each
    of its events is fanned out (a fan-out happens once per event); None before that."""

    async def read(conn: Connection) -> list[tuple[str, str]] | None:
        waiting = await conn.fetchval(
            "SELECT count(*) FROM outbox_events WHERE session_id = $1 AND fanned_out_at IS NULL",
            uuid.UUID(session_id),
        )
        if waiting:
            return None
        rows = await conn.fetch(
            """SELECT e.type, d.status FROM webhook_deliveries d JOIN outbox_events e ON e.seq = d.event_seq
               WHERE d.session_id = $1 ORDER BY d.event_seq""",
            uuid.UUID(session_id),
        )
        return [(row["type"], row["status"]) for row in rows]

    return await db.autocommit(read)


async def succeeded(client: Client, shop: Shop, session_id: str) -> bool:
    """Whether the session is paid (its `session.completed` event committed with that)."""
    response = await client.get(f"/api/v1/sessions/{session_id}", headers=shop.headers)
    return bool((await response.get_json())["status"] == "SUCCEEDED")


def types_of(requests: list[ReceivedRequest]) -> list[str]:
    return [request.json()["type"] for request in requests]


async def delivery_in(
    client: Client, shop: Shop, config: dict[str, Any], status: str
) -> dict[str, Any] | None:
    """The configuration's only delivery once it has `status`, else None."""
    items = await deliveries(client, shop, config)
    return items[0] if len(items) == 1 and items[0]["status"] == status else None


async def deliveries(client: Client, shop: Shop, config: dict[str, Any]) -> list[dict[str, Any]]:
    response = await client.get(
        f"/api/v1/applications/{shop.application_id}/webhooks/{config['id']}/deliveries",
        headers=shop.merchant.headers,
    )
    items: list[dict[str, Any]] = (await response.get_json())["items"]
    return items


async def test_completed_session_is_delivered_signed_per_standard_webhooks(
    client: Client, shop: Shop, webhook_receiver: WebhookReceiver
) -> None:
    config = await subscribe(client, shop, webhook_receiver)
    session_id = await pay(client, shop)
    (request,) = await webhook_receiver.wait_for(1, timeout_s=10)
    assert request.verified
    standardwebhooks.Webhook(config["signingSecret"]).verify(request.body, request.headers)
    body = request.json()
    assert body["type"] == "session.completed"
    assert body["id"] == request.headers["webhook-id"]
    assert body["applicationId"] == shop.application_id
    assert body["data"]["id"] == session_id
    assert body["data"]["status"] == "SUCCEEDED"
    assert body["data"]["amount"] == Decimal("100.00")
    assert request.headers["webhook-key-fingerprint"] == config["keyFingerprint"]


def scheduled_wait_s(item: dict[str, Any]) -> float:
    """How long after its last attempt a PENDING delivery is due again, as recorded."""
    attempted = datetime.fromisoformat(item["attemptLog"][-1]["attemptedAt"])
    return (datetime.fromisoformat(item["nextAttemptAt"]) - attempted).total_seconds()


async def pending_after(
    client: Client, shop: Shop, config: dict[str, Any], attempts: int
) -> dict[str, Any] | None:
    """The configuration's only delivery once it is PENDING after `attempts` recorded attempts."""
    item = await delivery_in(client, shop, config, "PENDING")
    return item if item is not None and len(item["attemptLog"]) == attempts else None


@asynccontextmanager
async def subscribed_with_schedule(
    db: Database, settings: Settings, clock: ShiftedClock, receiver: WebhookReceiver, schedule: list[float]
) -> AsyncIterator[tuple[Client, Shop, dict[str, Any]]]:
    """A running service on `clock` whose retries follow `schedule`, and a shop subscribed to
    `receiver`."""
    from payorch.runtime import open_runtime

    scheduled = settings.model_copy(
        update={"webhooks": settings.webhooks.model_copy(update={"retry_schedule_s": schedule})}
    )
    async with open_runtime(scheduled, db, clock) as runtime:
        client = runtime.app.test_client()
        shop = await new_shop(client, db, scheduled)
        yield client, shop, await subscribe(client, shop, receiver)


async def test_failed_attempts_are_retried_on_schedule_with_the_same_webhook_id(
    db: Database, settings: Settings, clock: ShiftedClock, webhook_receiver: WebhookReceiver
) -> None:
    schedule = [0.0, 60, 120, 240]
    async with subscribed_with_schedule(db, settings, clock, webhook_receiver, schedule) as (
        client,
        shop,
        config,
    ):
        webhook_receiver.script([500, 502])
        await pay(client, shop)
        item = await eventually(lambda: pending_after(client, shop, config, 1))
        assert scheduled_wait_s(item) == 60
        clock.advance(60)
        item = await eventually(lambda: pending_after(client, shop, config, 2))
        assert scheduled_wait_s(item) == 120
        clock.advance(120)
        item = await eventually(lambda: delivery_in(client, shop, config, "DELIVERED"))
    requests = webhook_receiver.requests
    assert len(requests) == 3
    assert len({request.headers["webhook-id"] for request in requests}) == 1
    assert all(request.verified for request in requests)
    assert item["attempts"] == 3
    assert [attempt["httpStatusCode"] for attempt in item["attemptLog"]] == [500, 502, 200]


async def test_delivery_fails_after_the_last_attempt_and_can_be_retried_by_hand(
    client: Client, shop: Shop, webhook_receiver: WebhookReceiver
) -> None:
    config = await subscribe(client, shop, webhook_receiver)
    webhook_receiver.script([500, 500, 500, 500])
    await pay(client, shop)

    item = await eventually(lambda: delivery_in(client, shop, config, "FAILED"))
    assert item["attempts"] == 4
    retried = await client.post(
        f"/api/v1/applications/{shop.application_id}/webhooks/{config['id']}/deliveries/{item['id']}/retry",
        headers=shop.merchant.headers,
    )
    assert retried.status_code == 202
    await webhook_receiver.wait_for(5, timeout_s=10)

    await eventually(lambda: delivery_in(client, shop, config, "DELIVERED"))


async def test_retry_after_from_the_receiver_is_honoured(
    db: Database, settings: Settings, clock: ShiftedClock, webhook_receiver: WebhookReceiver
) -> None:
    # A Retry-After is honoured up to the schedule's longest wait: make that longer than 30 s.
    schedule = [0, 0.2, 0.2, 60]
    async with subscribed_with_schedule(db, settings, clock, webhook_receiver, schedule) as (
        client,
        shop,
        config,
    ):
        webhook_receiver.script([(503, {"Retry-After": "30"}, b"busy")])
        await pay(client, shop)
        item = await eventually(lambda: pending_after(client, shop, config, 1))
        assert scheduled_wait_s(item) == 30  # the receiver's wait, not the schedule's 0.2 s
        clock.advance(30)
        await webhook_receiver.wait_for(2, timeout_s=10)
        await eventually(lambda: delivery_in(client, shop, config, "DELIVERED"))


async def test_410_gone_deactivates_the_configuration(
    client: Client, shop: Shop, db: Database, webhook_receiver: WebhookReceiver
) -> None:
    config = await subscribe(client, shop, webhook_receiver)
    webhook_receiver.script([410])
    await pay(client, shop)
    await webhook_receiver.wait_for(1, timeout_s=10)
    path = f"/api/v1/applications/{shop.application_id}/webhooks/{config['id']}"

    async def inactive() -> bool:
        return (await (await client.get(path, headers=shop.merchant.headers)).get_json())["isActive"] is False

    await eventually(inactive)
    second = await pay(client, shop, "second")
    await eventually(lambda: succeeded(client, shop, second))
    # The session's event is fanned out to no configuration: nothing of it will ever be sent.
    assert await eventually(lambda: all_that_will_be_sent(db, second)) == []
    assert len(webhook_receiver.requests) == 1


async def test_session_events_arrive_in_order_even_when_the_first_needs_retries(
    client: Client, shop: Shop, webhook_receiver: WebhookReceiver
) -> None:
    await subscribe(client, shop, webhook_receiver)
    webhook_receiver.script([500, 500])
    session_id = await pay(client, shop)

    async def paid() -> bool:
        record = await (await client.get(f"/api/v1/sessions/{session_id}", headers=shop.headers)).get_json()
        return bool(record["status"] == "SUCCEEDED")

    await eventually(paid)
    refund = await post_json(
        client, f"/api/v1/sessions/{session_id}/refunds", {}, {**shop.headers, "Idempotency-Key": "r"}
    )
    assert refund.status_code == 201
    requests = await webhook_receiver.wait_for(4, timeout_s=15)
    assert types_of(requests) == ["session.completed"] * 3 + ["refund.completed"]


async def test_inactive_and_unsubscribed_configurations_receive_nothing(
    client: Client, shop: Shop, db: Database, webhook_receiver: WebhookReceiver
) -> None:
    inactive = await subscribe(client, shop, webhook_receiver, path="/inactive")
    await client.patch(
        f"/api/v1/applications/{shop.application_id}/webhooks/{inactive['id']}",
        json={"isActive": False},
        headers=shop.merchant.headers,
    )
    await subscribe(client, shop, webhook_receiver, events=["refund.failed"], path="/refunds-only")
    await subscribe(client, shop, webhook_receiver, events=["session.completed"], path="/sessions")
    session_id = await pay(client, shop)
    (request,) = await webhook_receiver.wait_for(1, timeout_s=10)
    assert request.path.endswith("/sessions")
    # The event was fanned out to that one configuration only: nothing else will ever be sent.
    deliveries = await eventually(lambda: all_that_will_be_sent(db, session_id))
    assert [event_type for event_type, _ in deliveries] == ["session.completed"]
    assert len(webhook_receiver.requests) == 1


async def test_after_rotation_deliveries_carry_signatures_of_both_secrets(
    client: Client, shop: Shop, webhook_receiver: WebhookReceiver
) -> None:
    config = await subscribe(client, shop, webhook_receiver)
    rotated = await (
        await client.patch(
            f"/api/v1/applications/{shop.application_id}/webhooks/{config['id']}/secret",
            headers=shop.merchant.headers,
        )
    ).get_json()
    await pay(client, shop)
    (request,) = await webhook_receiver.wait_for(1, timeout_s=10)
    assert_signed_during_overlap(
        request, config["signingSecret"], rotated["signingSecret"], rotated["keyFingerprint"]
    )


async def test_after_the_overlap_only_the_new_secret_signs(
    client: Client, db: Database, settings: Settings, webhook_receiver: WebhookReceiver
) -> None:
    from payorch.runtime import open_runtime

    no_overlap = settings.model_copy(
        update={"webhooks": settings.webhooks.model_copy(update={"rotation_overlap_s": 0})}
    )
    async with open_runtime(no_overlap, db) as runtime:
        client = runtime.app.test_client()
        shop = await new_shop(client, db, no_overlap)
        config = await subscribe(client, shop, webhook_receiver)
        await client.patch(
            f"/api/v1/applications/{shop.application_id}/webhooks/{config['id']}/secret",
            headers=shop.merchant.headers,
        )
        await pay(client, shop)
        (request,) = await webhook_receiver.wait_for(1, timeout_s=10)
    assert len(request.headers["webhook-signature"].split(" ")) == 1
    with pytest.raises(standardwebhooks.WebhookVerificationError):
        standardwebhooks.Webhook(config["signingSecret"]).verify(request.body, request.headers)


async def test_refund_failure_is_delivered_with_its_reason(
    client: Client, shop: Shop, webhook_receiver: WebhookReceiver
) -> None:
    await subscribe(client, shop, webhook_receiver, events=["refund.failed"])
    created = await (await create_session(client, shop, "k")).get_json()
    await client.post(urlsplit(created["checkoutUrl"]).path, form={"card_number": "4000000000005126"})

    async def paid() -> bool:
        record = await (
            await client.get(f"/api/v1/sessions/{created['sessionId']}", headers=shop.headers)
        ).get_json()
        return bool(record["status"] == "SUCCEEDED")

    await eventually(paid)
    await post_json(
        client,
        f"/api/v1/sessions/{created['sessionId']}/refunds",
        {},
        {**shop.headers, "Idempotency-Key": "r"},
    )
    (request,) = await webhook_receiver.wait_for(1, timeout_s=10)
    body = request.json()
    assert body["type"] == "refund.failed"
    assert body["data"]["failureReason"] == "LOST_OR_STOLEN_CARD"
    assert body["data"]["sessionId"] == created["sessionId"]
    uuid.UUID(body["data"]["id"])


async def test_shutdown_hands_claimed_deliveries_back(
    db: Database, settings: Settings, webhook_receiver: WebhookReceiver
) -> None:
    from payorch.runtime import open_runtime
    from tests.webhook_receiver import ScriptedResponse

    webhook_receiver.script([ScriptedResponse(200, delay_s=60)])  # the first delivery hangs
    async with open_runtime(settings, db) as runtime:
        client = runtime.app.test_client()
        shop = await new_shop(client, db, settings)
        await subscribe(client, shop, webhook_receiver)
        await pay(client, shop)
        await webhook_receiver.wait_for(1, timeout_s=10)
    # The runtime stopped while the delivery was in flight: it is due again at once, unattempted.

    async def state(conn: Any) -> Any:
        return await conn.fetchrow(
            "SELECT status, attempts, next_attempt_at <= now() AS due FROM webhook_deliveries"
        )

    row = await db.autocommit(state)
    assert (row["status"], row["attempts"], row["due"]) == ("PENDING", 0, True)


async def test_a_delivery_held_behind_its_sessions_earlier_event_says_which_it_waits_for(
    client: Client, shop: Shop, webhook_receiver: WebhookReceiver
) -> None:
    config = await subscribe(client, shop, webhook_receiver)
    webhook_receiver.script([500] * 6)  # the session's first event stays PENDING a while
    session_id = await pay(client, shop)

    async def paid() -> bool:
        record = await (await client.get(f"/api/v1/sessions/{session_id}", headers=shop.headers)).get_json()
        return bool(record["status"] == "SUCCEEDED")

    await eventually(paid)
    refund = await post_json(
        client, f"/api/v1/sessions/{session_id}/refunds", {}, {**shop.headers, "Idempotency-Key": "w"}
    )
    assert refund.status_code == 201

    async def held() -> dict[str, dict[str, Any]] | None:
        found = {item["eventType"]: item for item in await deliveries(client, shop, config)}
        waiting = found.get("refund.completed")
        return found if waiting is not None and waiting["waitsForEventId"] is not None else None

    found = await eventually(held, timeout_s=15)
    first = found["session.completed"]
    assert first["status"] == "PENDING" and first["waitsForEventId"] is None
    assert found["refund.completed"]["waitsForEventId"] == first["eventId"]
