"""A session's life: paid through the checkout URL, declined, expired; provider events applied once,
each state change committed with its outbox event."""

from __future__ import annotations

import json
import time
import uuid
from typing import Any
from urllib.parse import urlsplit

import pytest
import trio

from payorch.config import Settings
from payorch.providers.sandbox.signing import SIGNATURE_HEADER, signature_header
from payorch.runtime import open_runtime
from payorch.storage import outbox, provider_configs, sessions
from payorch.storage.database import Connection, Database
from tests.clock import ShiftedClock
from tests.helpers import Client, Shop, create_session, eventually, new_shop, session_body


@pytest.fixture
async def shop(client: Client, db: Database, settings: Settings) -> Shop:
    return await new_shop(client, db, settings)


async def _created(client: Client, shop: Shop, key: str = "k", **change: Any) -> dict[str, Any]:
    response = await create_session(client, shop, key, session_body(**change))
    assert response.status_code == 201, await response.get_data(as_text=True)
    body: dict[str, Any] = await response.get_json()
    return body


async def _record(client: Client, shop: Shop, session_id: str) -> dict[str, Any]:
    body: dict[str, Any] = await (
        await client.get(f"/api/v1/sessions/{session_id}", headers=shop.headers)
    ).get_json()
    return body


async def _await_status(client: Client, shop: Shop, session_id: str, wanted: str) -> dict[str, Any]:
    async def with_status() -> dict[str, Any] | None:
        record = await _record(client, shop, session_id)
        return record if record["status"] == wanted else None

    return await eventually(with_status)


async def _events(db: Database, session_id: str) -> list[dict[str, Any]]:
    return await db.autocommit(outbox.events_of_session, uuid.UUID(session_id))


async def _events_seen(db: Database) -> int:
    async def count(conn: Connection) -> int:
        return int(await conn.fetchval("SELECT count(*) FROM provider_events_seen"))

    return await db.autocommit(count)


async def test_paying_by_card_through_the_checkout_url_succeeds_and_emits_session_completed(
    client: Client, shop: Shop, db: Database
) -> None:
    created = await _created(client, shop)
    page = urlsplit(created["checkoutUrl"]).path
    shown = await client.get(page)
    assert "100.00" in await shown.get_data(as_text=True)
    paid = await client.post(page, form={"card_number": "4242424242424242"})
    assert paid.status_code == 200
    record = await _await_status(client, shop, created["sessionId"], "SUCCEEDED")
    assert record["refunds"] == []
    (event,) = await _events(db, created["sessionId"])
    assert event["type"] == "session.completed"
    assert event["id"].startswith("evt_")
    assert event["applicationId"] == shop.application_id
    assert event["data"]["id"] == created["sessionId"]
    assert event["data"]["status"] == "SUCCEEDED"


async def test_paying_by_blik_succeeds(client: Client, shop: Shop) -> None:
    created = await _created(client, shop, method="blik")
    await client.post(urlsplit(created["checkoutUrl"]).path, form={"blik_code": "777123"})
    await _await_status(client, shop, created["sessionId"], "SUCCEEDED")


async def test_payment_redirects_to_the_merchants_success_url(client: Client, shop: Shop) -> None:
    created = await _created(
        client,
        shop,
        redirectUrls={"success": "https://shop.example/ok", "failure": "https://shop.example/ko"},
    )
    paid = await client.post(urlsplit(created["checkoutUrl"]).path, form={"card_number": "4242424242424242"})
    assert paid.status_code == 303
    # Back through payorch, which reads the outcome and sends the customer on to the merchant.
    back = urlsplit(paid.headers["Location"])
    assert (back.path, back.query) == (f"/checkout/{created['sessionId']}/return", "attempt=1")
    onward = await client.get(f"{back.path}?{back.query}")
    assert onward.status_code == 303
    assert onward.headers["Location"] == "https://shop.example/ok"


async def test_a_declined_payment_redirects_to_the_merchants_failure_url(client: Client, shop: Shop) -> None:
    created = await _created(
        client,
        shop,
        redirectUrls={"success": "https://shop.example/ok", "failure": "https://shop.example/ko"},
    )
    declined = await client.post(
        urlsplit(created["checkoutUrl"]).path, form={"card_number": "4000000000000002"}
    )
    assert declined.status_code == 303
    back = urlsplit(declined.headers["Location"])
    onward = await client.get(f"{back.path}?{back.query}")
    assert onward.status_code == 303
    assert onward.headers["Location"] == "https://shop.example/ko"
    assert (await _record(client, shop, created["sessionId"]))["status"] == "PENDING"


async def test_declined_card_leaves_the_session_pending(client: Client, shop: Shop, db: Database) -> None:
    created = await _created(client, shop)
    declined = await client.post(
        urlsplit(created["checkoutUrl"]).path, form={"card_number": "4000000000000002"}
    )
    assert declined.status_code == 402

    async def declined_seen() -> int | None:
        return await _events_seen(db) or None

    await eventually(declined_seen)
    record = await _record(client, shop, created["sessionId"])
    assert (record["status"], record["failureReason"]) == ("PENDING", None)
    assert await _events(db, created["sessionId"]) == []
    # The customer may try again.
    await client.post(urlsplit(created["checkoutUrl"]).path, form={"card_number": "4242424242424242"})
    await _await_status(client, shop, created["sessionId"], "SUCCEEDED")


async def test_pending_session_expires_to_failed_once_its_ttl_has_passed_and_not_before(
    client: Client, shop: Shop, db: Database, settings: Settings, clock: ShiftedClock
) -> None:
    created = await _created(client, shop)
    clock.advance(settings.sessions.ttl_s - 1)
    # What the expiry supervisor picks is nothing a second before the session's expiry.
    assert await db.autocommit(sessions.sessions_due_for_expiry, 10, per_merchant=10, now=clock.now()) == []
    assert (await _record(client, shop, created["sessionId"]))["status"] == "PENDING"
    clock.advance(2)
    record = await _await_status(client, shop, created["sessionId"], "FAILED")
    assert record["failureReason"] == "EXPIRED"
    (event,) = await _events(db, created["sessionId"])
    assert event["type"] == "session.expired"
    assert event["data"]["failureReason"] == "EXPIRED"


async def test_session_that_expired_while_the_service_was_down_expires_after_restart(
    db: Database, settings: Settings, clock: ShiftedClock
) -> None:
    async with open_runtime(settings, db, clock) as runtime:
        client = runtime.app.test_client()
        shop = await new_shop(client, db, settings)
        created = await _created(client, shop)
    clock.advance(settings.sessions.ttl_s + 1)  # the service is down while the session's expiry passes
    async with open_runtime(settings, db, clock) as restarted:
        await _await_status(restarted.app.test_client(), shop, created["sessionId"], "FAILED")


async def _signed_event(
    db: Database,
    settings: Settings,
    shop: Shop,
    session_id: str,
    event_id: str,
    checkout_id: str | None = None,
) -> tuple[bytes, str]:
    """A `checkout.paid` as the sandbox sends it for the session's checkout (or `checkout_id`),
    signed with this application's endpoint secret."""
    from payorch.values.secretbox import SecretBox

    if checkout_id is None:
        found = await db.autocommit(sessions.get_session, uuid.UUID(session_id))
        checkout_id = found.provider_reference if found is not None else "cs_sbx_unknown"
    config = await db.autocommit(
        provider_configs.get_provider_config, uuid.UUID(shop.application_id), "sandbox"
    )
    assert config is not None and config.webhook_secret is not None
    secret = SecretBox(settings.security.encryption_key).open(config.webhook_secret)
    body = json.dumps(
        {
            "id": event_id,
            "type": "checkout.paid",
            "created": int(time.time()),
            "data": {"checkout_id": checkout_id, "client_reference": session_id},
        }
    ).encode()
    return body, signature_header(secret, body, int(time.time()))


async def _deliver(
    client: Client, shop: Shop, signed: tuple[bytes, str], signature: str | None = None
) -> Any:
    body, header = signed
    return await client.post(
        f"/api/v1/provider-events/sandbox/{shop.application_id}",
        data=body,
        headers={SIGNATURE_HEADER: signature or header, "Content-Type": "application/json"},
    )


async def test_event_with_a_bad_signature_is_400_and_changes_nothing(
    client: Client, shop: Shop, db: Database, settings: Settings
) -> None:
    created = await _created(client, shop)
    signed = await _signed_event(db, settings, shop, created["sessionId"], "evt_sbx_forged")
    response = await _deliver(client, shop, signed, signature=f"t={int(time.time())},v1={'0' * 64}")
    assert response.status_code == 400
    assert (await _record(client, shop, created["sessionId"]))["status"] == "PENDING"
    assert await _events_seen(db) == 0


@pytest.mark.parametrize("header", [f"t={'9' * 400},v1=00", "t=\u00b2,v1=00", "v1", "t=1,t=2"])
async def test_event_with_a_signature_header_that_does_not_parse_is_400_and_changes_nothing(
    client: Client, shop: Shop, db: Database, settings: Settings, header: str
) -> None:
    created = await _created(client, shop)
    signed = await _signed_event(db, settings, shop, created["sessionId"], "evt_sbx_garbled")
    response = await _deliver(client, shop, signed, signature=header)
    assert response.status_code == 400
    assert (await response.get_json())["code"] == 400
    assert (await _record(client, shop, created["sessionId"]))["status"] == "PENDING"


async def test_event_naming_another_checkout_than_the_sessions_changes_nothing(
    client: Client, shop: Shop, db: Database, settings: Settings
) -> None:
    created = await _created(client, shop)
    other = await _created(client, shop, key="k2")
    other_checkout = urlsplit(other["checkoutUrl"]).path.rsplit("/", 1)[1]
    signed = await _signed_event(
        db, settings, shop, created["sessionId"], "evt_sbx_crossed", checkout_id=other_checkout
    )
    response = await _deliver(client, shop, signed)
    assert response.status_code == 200
    assert (await response.get_json())["applied"] is False
    assert (await _record(client, shop, created["sessionId"]))["status"] == "PENDING"
    assert (await _record(client, shop, other["sessionId"]))["status"] == "PENDING"


async def test_same_provider_event_delivered_twice_is_applied_once(
    client: Client, shop: Shop, db: Database, settings: Settings
) -> None:
    created = await _created(client, shop)
    signed = await _signed_event(db, settings, shop, created["sessionId"], "evt_sbx_once")
    first = await _deliver(client, shop, signed)
    again = await _deliver(client, shop, signed)
    assert (await first.get_json())["applied"] is True
    assert (await again.get_json())["applied"] is False
    assert len(await _events(db, created["sessionId"])) == 1


async def test_100_concurrent_events_for_one_session_apply_one_transition(
    client: Client, shop: Shop, db: Database, settings: Settings
) -> None:
    created = await _created(client, shop)
    answers: list[bool] = []

    async def deliver(number: int) -> None:
        signed = await _signed_event(db, settings, shop, created["sessionId"], f"evt_sbx_{number}")
        answers.append((await (await _deliver(client, shop, signed)).get_json())["applied"])

    async with trio.open_nursery() as senders:
        for number in range(100):
            senders.start_soon(deliver, number)
    assert answers.count(True) == 1
    assert len(answers) == 100
    assert [event["type"] for event in await _events(db, created["sessionId"])] == ["session.completed"]


async def test_event_for_another_applications_session_is_acknowledged_and_ignored(
    client: Client, shop: Shop, db: Database, settings: Settings
) -> None:
    other = await new_shop(client, db, settings)
    created = await _created(client, other)
    signed = await _signed_event(db, settings, shop, created["sessionId"], "evt_sbx_elsewhere")
    response = await _deliver(client, shop, signed)
    assert response.status_code == 200
    assert (await response.get_json())["applied"] is False
    assert (await _record(client, other, created["sessionId"]))["status"] == "PENDING"


async def test_event_for_an_unknown_application_is_404(client: Client) -> None:
    response = await client.post(f"/api/v1/provider-events/sandbox/{uuid.uuid4()}", data=b"{}")
    assert response.status_code == 404
