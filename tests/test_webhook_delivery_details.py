"""A delivery read in detail through the API, to a real HTTPS receiver: the body sent, each attempt's
headers, the receiver's status, headers and the first 4 KiB of its body (or why there was no
answer), why a delivery waits, resending it, and the details removed after their retention."""

from __future__ import annotations

from typing import Any

import pytest

from payorch.config import Settings
from payorch.http.services import PayorchApp
from payorch.storage.database import Database
from payorch.supervisors.attempt_details import remove_expired_attempt_details
from tests import webhook_receiver as receiving
from tests.clock import ShiftedClock
from tests.helpers import PASSWORD, Client, Shop, eventually, new_shop, post_json
from tests.test_webhook_delivery import deliveries, pay, subscribe, subscribed_with_schedule
from tests.webhook_receiver import ScriptedResponse, WebhookReceiver

webhook_receiver = receiving.webhook_receiver

DAY_S = 86400


@pytest.fixture
def settings(settings: Settings, webhook_receiver: WebhookReceiver) -> Settings:
    """The receiver's CA trusted, and a short retry schedule: 2 attempts 0.2 s apart."""
    return settings.model_copy(
        update={
            "webhooks": settings.webhooks.model_copy(
                update={"ca_bundle": webhook_receiver.ca_path, "retry_schedule_s": [0, 0.2], "timeout_s": 5}
            )
        }
    )


@pytest.fixture
async def shop(client: Client, db: Database, settings: Settings) -> Shop:
    return await new_shop(client, db, settings)


def delivery_path(shop: Shop, config: dict[str, Any], delivery_id: str) -> str:
    return f"/api/v1/applications/{shop.application_id}/webhooks/{config['id']}/deliveries/{delivery_id}"


async def read(client: Client, shop: Shop, config: dict[str, Any], delivery_id: str) -> dict[str, Any]:
    response = await client.get(delivery_path(shop, config, delivery_id), headers=shop.merchant.headers)
    return await read_answer(response)


async def read_answer(response: Any) -> dict[str, Any]:
    assert response.status_code == 200, await response.get_data(as_text=True)
    body: dict[str, Any] = await response.get_json()
    return body


async def ended(client: Client, shop: Shop, config: dict[str, Any]) -> dict[str, Any] | None:
    """The configuration's only delivery once it is DELIVERED or FAILED, else None."""
    items = await deliveries(client, shop, config)
    done = len(items) == 1 and items[0]["status"] in ("DELIVERED", "FAILED")
    return items[0] if done else None


def header(fields: list[dict[str, str]], name: str) -> str:
    (value,) = [field["value"] for field in fields if field["name"] == name]
    return value


async def test_a_401_with_a_body_shows_its_status_headers_and_body_and_the_request_sent(
    client: Client, shop: Shop, webhook_receiver: WebhookReceiver
) -> None:
    config = await subscribe(client, shop, webhook_receiver)
    refusal = (
        401,
        {"www-authenticate": 'Bearer realm="hooks"', "x-trace": "t-1"},
        b'{"error":"who are you?"}',
    )
    webhook_receiver.script([refusal, refusal])
    await pay(client, shop)
    listed = await eventually(lambda: ended(client, shop, config))
    assert listed["status"] == "FAILED" and listed["waitReason"] is None

    details = await read(client, shop, config, listed["id"])
    first, second = await webhook_receiver.wait_for(2, timeout_s=10)
    assert details["requestBody"].encode() == first.body == second.body
    assert details["webhookId"] == config["id"] and details["olderAttempts"] == 0
    assert [attempt["number"] for attempt in details["attemptLog"]] == [1, 2]
    attempt = details["attemptLog"][0]
    assert (attempt["httpStatusCode"], attempt["error"], attempt["detailsRemovedAt"]) == (401, None, None)
    assert attempt["responseBody"] == '{"error":"who are you?"}'
    assert header(attempt["responseHeaders"], "www-authenticate") == 'Bearer realm="hooks"'
    assert header(attempt["responseHeaders"], "x-trace") == "t-1"
    # The headers sent are those the receiver got: the signature, never the secret.
    sent = attempt["requestHeaders"]
    for name in ("webhook-id", "webhook-timestamp", "webhook-signature", "webhook-key-fingerprint"):
        assert header(sent, name) == first.headers[name]
    assert config["signingSecret"] not in str(details)
    assert config["signingSecret"].removeprefix("whsec_") not in str(details)


async def test_an_answer_over_4_kib_is_stored_cut_at_4096_bytes(
    client: Client, shop: Shop, webhook_receiver: WebhookReceiver
) -> None:
    config = await subscribe(client, shop, webhook_receiver)
    webhook_receiver.script([ScriptedResponse(200, {}, b"a" * 5000, streamed_body_bytes=1_000_000)])
    await pay(client, shop)
    listed = await eventually(lambda: ended(client, shop, config))
    (attempt,) = (await read(client, shop, config, listed["id"]))["attemptLog"]
    assert attempt["httpStatusCode"] == 200
    assert attempt["responseBody"] == "a" * 4096


async def test_an_attempt_without_an_answer_says_why_and_has_no_answer_details(
    client: Client, shop: Shop, webhook_receiver: WebhookReceiver
) -> None:
    # Nothing listens on port 1 of this host: the connection is refused.
    config = await subscribe(client, shop, webhook_receiver)
    await client.patch(
        f"/api/v1/applications/{shop.application_id}/webhooks/{config['id']}",
        json={"url": "https://127.0.0.1:1/hooks"},
        headers=shop.merchant.headers,
    )
    await pay(client, shop)
    listed = await eventually(lambda: ended(client, shop, config))
    attempt = (await read(client, shop, config, listed["id"]))["attemptLog"][0]
    assert attempt["httpStatusCode"] is None
    assert attempt["error"] == "connection refused: nothing listens on 127.0.0.1:1"
    assert (attempt["responseHeaders"], attempt["responseBody"]) == (None, None)
    assert header(attempt["requestHeaders"], "content-type") == "application/json"


async def held_behind_the_first(
    client: Client, shop: Shop, config: dict[str, Any], receiver: WebhookReceiver
) -> tuple[dict[str, Any], dict[str, Any]]:
    """A paid session whose `session.completed` delivery was refused once and waits for its second
    attempt, then refunded: (that delivery as listed before the refund, the `refund.completed`
    delivery as listed once it is held behind it). Run on a schedule with long waits."""
    receiver.script([500])
    session_id = await pay(client, shop)

    async def waiting_for_its_second_attempt() -> dict[str, Any] | None:
        # Its first attempt made and answered: while that attempt is in flight the delivery counts
        # it already and says "sending now".
        items = await deliveries(client, shop, config)
        if not items or items[0]["attempts"] != 1 or not items[0]["nextAttemptAt"]:
            return None
        return items[0] if items[0]["waitReason"].startswith("next attempt at") else None

    first = await eventually(waiting_for_its_second_attempt)
    refund = await post_json(
        client, f"/api/v1/sessions/{session_id}/refunds", {}, {**shop.headers, "Idempotency-Key": "r"}
    )
    assert refund.status_code == 201

    async def held() -> dict[str, Any] | None:
        found = {item["eventType"]: item for item in await deliveries(client, shop, config)}
        return found.get("refund.completed")

    return first, await eventually(held)


async def test_a_delivery_held_behind_its_sessions_earlier_event_says_so_and_the_earlier_its_next_attempt(
    db: Database, settings: Settings, clock: ShiftedClock, webhook_receiver: WebhookReceiver
) -> None:
    async with subscribed_with_schedule(db, settings, clock, webhook_receiver, [0, 600, 600]) as (
        client,
        shop,
        config,
    ):
        first, second = await held_behind_the_first(client, shop, config, webhook_receiver)
        assert first["status"] == "PENDING"
        assert first["waitReason"] == f"next attempt at {first['nextAttemptAt']} (attempt 2 of 3)"
        expected = (
            f"held behind event {first['eventId']} of the same session (delivery {first['id']}): "
            "a session's events reach an endpoint in order"
        )
        assert second["waitReason"] == expected
        assert (second["waitsForEventId"], second["waitsForDeliveryId"]) == (first["eventId"], first["id"])
        assert (await read(client, shop, config, second["id"]))["waitReason"] == expected
        assert len(webhook_receiver.requests) == 1  # the refund's event waits, unsent


async def test_resending_a_delivered_delivery_sends_it_again_and_logs_the_attempt(
    client: Client, shop: Shop, webhook_receiver: WebhookReceiver
) -> None:
    config = await subscribe(client, shop, webhook_receiver)
    await pay(client, shop)
    listed = await eventually(lambda: ended(client, shop, config))
    assert listed["status"] == "DELIVERED"
    response = await client.post(
        f"{delivery_path(shop, config, listed['id'])}/retry", headers=shop.merchant.headers
    )
    assert response.status_code == 202
    assert await response.get_json() == {"id": listed["id"], "status": "PENDING"}
    first, again = await webhook_receiver.wait_for(2, timeout_s=10)
    assert again.body == first.body and again.headers["webhook-id"] == first.headers["webhook-id"]

    async def logged_twice() -> dict[str, Any] | None:
        details = await read(client, shop, config, listed["id"])
        return details if details["status"] == "DELIVERED" and len(details["attemptLog"]) == 2 else None

    details = await eventually(logged_twice)
    assert [attempt["httpStatusCode"] for attempt in details["attemptLog"]] == [200, 200]


async def test_attempt_details_are_removed_after_their_retention_and_the_outcome_stays(
    app: PayorchApp, client: Client, shop: Shop, clock: ShiftedClock, webhook_receiver: WebhookReceiver
) -> None:
    config = await subscribe(client, shop, webhook_receiver)
    webhook_receiver.script([(401, {"x-trace": "t-1"}, b"no")])
    await pay(client, shop)
    listed = await eventually(lambda: ended(client, shop, config))
    context = app.services.context

    kept = await read(client, shop, config, listed["id"])
    clock.advance(29 * DAY_S)
    assert await remove_expired_attempt_details(context) == 0
    assert [attempt["responseBody"] for attempt in kept["attemptLog"]] == ["no", '{"received":true}']

    clock.advance(2 * DAY_S)
    assert await remove_expired_attempt_details(context) == 2
    # A month later the merchant's admin logs in again (the earlier token has expired).
    login = await client.post("/api/v1/auth/login", json={"email": shop.merchant.email, "password": PASSWORD})
    headers = {"Authorization": f"Bearer {(await login.get_json())['accessToken']}"}
    details = await read_answer(await client.get(delivery_path(shop, config, listed["id"]), headers=headers))
    assert details["requestBody"] == kept["requestBody"]  # the event's own body stays
    for attempt, before in zip(details["attemptLog"], kept["attemptLog"], strict=True):
        assert (attempt["httpStatusCode"], attempt["attemptedAt"]) == (
            before["httpStatusCode"],
            before["attemptedAt"],
        )
        assert (attempt["requestHeaders"], attempt["responseHeaders"], attempt["responseBody"]) == (
            None,
            None,
            None,
        )
        assert attempt["detailsRemovedAt"] is not None
    assert await remove_expired_attempt_details(context) == 0


async def test_another_merchants_delivery_is_not_visible_nor_one_of_another_configuration(
    client: Client, db: Database, settings: Settings, shop: Shop, webhook_receiver: WebhookReceiver
) -> None:
    config = await subscribe(client, shop, webhook_receiver)
    await pay(client, shop)
    listed = await eventually(lambda: ended(client, shop, config))
    other = await new_shop(client, db, settings)
    path = delivery_path(shop, config, listed["id"])
    assert (await client.get(path, headers=other.merchant.headers)).status_code == 403
    assert (await client.post(f"{path}/retry", headers=other.merchant.headers)).status_code == 403
    # The same merchant's other configuration has no such delivery; a malformed id names none.
    second = await subscribe(client, shop, webhook_receiver, path="/second")
    for wrong in (delivery_path(shop, second, listed["id"]), delivery_path(shop, config, "not-an-id")):
        response = await client.get(wrong, headers=shop.merchant.headers)
        assert response.status_code == 404
        assert (await response.get_json())["code"] == 404
    assert len(webhook_receiver.requests) == 1
