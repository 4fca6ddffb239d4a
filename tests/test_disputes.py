"""A lost dispute reaches the merchant: the sandbox's card 4000000000000259 is paid, then its dispute
is lost; every active webhook configuration hears `session.dispute_lost`, whatever it subscribed to,
and the session shows when (`disputeLostAt`)."""

from __future__ import annotations

import uuid
from typing import Any
from urllib.parse import urlsplit

import pytest

from payorch.config import Settings
from payorch.http.services import PayorchApp
from payorch.storage import outbox
from payorch.storage.database import Database
from tests import webhook_receiver as receiving
from tests.helpers import Client, Shop, create_session, lose_dispute, new_shop
from tests.http.test_refunds import paid_session, record_of, record_when
from tests.webhook_receiver import WebhookReceiver

webhook_receiver = receiving.webhook_receiver

DEFAULT_EVENTS = ["session.completed", "session.expired", "refund.completed", "refund.failed"]


@pytest.fixture
def settings(settings: Settings, webhook_receiver: WebhookReceiver) -> Settings:
    sandbox = settings.providers.sandbox.model_copy(update={"dispute_delay_ms": 100})
    return settings.model_copy(
        update={
            "webhooks": settings.webhooks.model_copy(
                update={
                    "ca_bundle": webhook_receiver.ca_path,
                    "retry_schedule_s": [0, 0.2, 0.2, 0.2],
                    "timeout_s": 5,
                }
            ),
            "providers": settings.providers.model_copy(update={"sandbox": sandbox}),
        }
    )


@pytest.fixture
async def shop(client: Client, db: Database, settings: Settings) -> Shop:
    return await new_shop(client, db, settings)


async def _subscribe(client: Client, shop: Shop, receiver: WebhookReceiver, path: str, **body: Any) -> Any:
    response = await client.post(
        f"/api/v1/applications/{shop.application_id}/webhooks",
        json={"url": receiver.url + path, **body},
        headers=shop.merchant.headers,
    )
    assert response.status_code == 201, await response.get_data(as_text=True)
    config = await response.get_json()
    receiver.accept_secret(config["signingSecret"])
    return config


async def test_a_lost_dispute_reaches_every_configuration_whatever_it_subscribed_to(
    app: PayorchApp, client: Client, db: Database, shop: Shop, webhook_receiver: WebhookReceiver
) -> None:
    default = await _subscribe(client, shop, webhook_receiver, "/default")
    assert default["subscribedEvents"] == DEFAULT_EVENTS
    await _subscribe(client, shop, webhook_receiver, "/refunds", subscribedEvents=["refund.completed"])
    session_id = await paid_session(client, shop)
    await lose_dispute(app, db, shop, session_id)  # as a provider's event would, once applied
    base = urlsplit(webhook_receiver.url).path
    refunds_only = await webhook_receiver.wait_for(1, timeout_s=20, path=f"{base}/refunds")
    both = await webhook_receiver.wait_for(2, timeout_s=20, path=f"{base}/default")
    assert [r.json()["type"] for r in both] == ["session.completed", "session.dispute_lost"]
    assert [r.json()["type"] for r in refunds_only] == ["session.dispute_lost"]
    assert all(r.verified for r in [*both, *refunds_only])
    data = refunds_only[0].json()["data"]
    assert (data["id"], data["status"]) == (session_id, "REVERSED")
    stored = await record_of(client, shop, session_id)
    assert stored["status"] == "REVERSED"
    assert stored["disputeLostAt"] == data["disputeLostAt"] is not None


async def test_the_sandboxs_disputed_card_reverses_the_session_and_tells_the_merchant(
    client: Client, db: Database, shop: Shop
) -> None:
    created = await (await create_session(client, shop, "k")).get_json()
    await client.post(urlsplit(created["checkoutUrl"]).path, form={"card_number": "4000000000000259"})
    record = await record_when(client, shop, created["sessionId"], lambda r: r["disputeLostAt"] is not None)
    assert record["status"] == "REVERSED"
    sent = await db.autocommit(outbox.events_of_session, uuid.UUID(created["sessionId"]))
    assert "session.dispute_lost" in [event["type"] for event in sent]


async def test_session_dispute_lost_may_be_named_in_subscribed_events(
    client: Client, shop: Shop, webhook_receiver: WebhookReceiver
) -> None:
    config = await _subscribe(client, shop, webhook_receiver, "", subscribedEvents=["session.dispute_lost"])
    assert config["subscribedEvents"] == ["session.dispute_lost"]
