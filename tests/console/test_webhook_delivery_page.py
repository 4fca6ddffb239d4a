"""A webhook delivery's console page: the event's body sent, each attempt with the receiver's status,
headers and body excerpt shown as text, why it waits, and the button that sends it again; all
through the API's operations, to a real HTTPS receiver."""

from __future__ import annotations

from typing import Any

import pytest
from markupsafe import escape

from payorch.config import Settings
from payorch.http.services import PayorchApp
from payorch.storage.database import Database
from tests import webhook_receiver as receiving
from tests.clock import ShiftedClock
from tests.console.helpers import page, signed_in_browser, submit
from tests.console.test_webhooks import api_create, console_webhooks, only_delivery, pay
from tests.helpers import Client, Shop, eventually, new_merchant, new_shop
from tests.test_webhook_delivery import subscribed_with_schedule
from tests.test_webhook_delivery_details import held_behind_the_first
from tests.webhook_receiver import WebhookReceiver

webhook_receiver = receiving.webhook_receiver

HOSTILE_BODY = b'<script>alert("hi")</script> denied'


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


async def ended_delivery(
    client: Client, db: Database, settings: Settings, receiver: WebhookReceiver, status: str, *answers: Any
) -> tuple[Shop, dict[str, Any], dict[str, Any]]:
    """A new shop subscribed to `receiver`, which gives `answers` (then 200), and a paid session:
    (the shop, the configuration, its one delivery once it has `status`)."""
    shop = await new_shop(client, db, settings)
    config = await api_create(client, shop.merchant, shop.application_id, receiver.url)
    receiver.accept_secret(config["signingSecret"])
    receiver.script(list(answers))
    await pay(client, shop)
    delivery = await eventually(
        lambda: only_delivery(client, shop.merchant, shop.application_id, config["id"], status)
    )
    return shop, config, delivery


def delivery_page(application_id: str, config: dict[str, Any], delivery: dict[str, Any]) -> str:
    return console_webhooks(application_id, config["id"], "deliveries", delivery["id"])


async def test_the_log_links_to_a_delivery_page_showing_the_body_sent_and_the_receivers_401_as_text(
    app: PayorchApp, client: Client, db: Database, settings: Settings, webhook_receiver: WebhookReceiver
) -> None:
    refusal = (401, {"www-authenticate": "Bearer <b>", "x-trace": "t-1"}, HOSTILE_BODY)
    shop, config, delivery = await ended_delivery(
        client, db, settings, webhook_receiver, "FAILED", refusal, refusal
    )
    (sent, _) = await webhook_receiver.wait_for(2, timeout_s=10)
    console, _ = await signed_in_browser(app, shop.merchant.email)
    path = delivery_page(shop.application_id, config, delivery)
    _, log = await page(console, console_webhooks(shop.application_id, config["id"]))
    assert f'href="{path}"' in log

    response, html = await page(console, path)
    assert response.status_code == 200
    assert str(escape(sent.body.decode())) in html  # the body sent, byte for byte, as text
    assert html.count('<span class="attempt-status">HTTP 401</span>') == 2
    assert "<code>www-authenticate</code></td><td><code>Bearer &lt;b&gt;</code>" in html
    assert "&lt;script&gt;alert(&#34;hi&#34;)&lt;/script&gt; denied" in html
    assert "<script>alert" not in html and "<b>" not in html
    assert sent.headers["webhook-signature"] in html  # the headers sent, under "Headers sent"
    assert config["signingSecret"] not in html
    assert "Why it waits" not in html  # FAILED: it waits for nothing
    assert 'id="resend"' in html


async def test_resending_from_the_delivery_page_sends_it_again_and_comes_back_to_it(
    app: PayorchApp, client: Client, db: Database, settings: Settings, webhook_receiver: WebhookReceiver
) -> None:
    shop, config, delivery = await ended_delivery(client, db, settings, webhook_receiver, "DELIVERED")
    console, csrf = await signed_in_browser(app, shop.merchant.email)
    path = delivery_page(shop.application_id, config, delivery)
    response, _ = await submit(console, f"{path}/retry", {"back": "delivery"})
    assert response.status_code == 403  # no CSRF token: nothing sent
    response, _ = await submit(console, f"{path}/retry", {"csrf_token": csrf, "back": "delivery"})
    assert response.status_code == 303
    assert response.headers["Location"] == f"{path}?done=resent"
    await webhook_receiver.wait_for(2, timeout_s=10)

    async def attempted_twice() -> str | None:
        _, html = await page(console, f"{path}?done=resent")
        return html if html.count('<span class="attempt-status">HTTP 200</span>') == 2 else None

    html = await eventually(attempted_twice)
    assert "Queued: payorch sends this delivery again" in html


async def test_a_delivery_held_behind_its_sessions_earlier_event_says_so_on_its_page_and_in_the_log(
    db: Database, settings: Settings, clock: ShiftedClock, webhook_receiver: WebhookReceiver
) -> None:
    async with subscribed_with_schedule(db, settings, clock, webhook_receiver, [0, 600, 600]) as (
        client,
        shop,
        config,
    ):
        first, held = await held_behind_the_first(client, shop, config, webhook_receiver)
        console, _ = await signed_in_browser(client.app, shop.merchant.email)
        _, html = await page(console, delivery_page(shop.application_id, config, held))
        words = f"held behind event {first['eventId']} of the same session (delivery {first['id']})"
        assert words in html
        assert f'href="{delivery_page(shop.application_id, config, first)}">see that delivery' in html
        _, log = await page(console, console_webhooks(shop.application_id, config["id"]))
        assert words in log and "next attempt at " in log and "(attempt 2 of 3)" in log


async def test_another_merchants_delivery_page_is_404_and_shows_nothing_of_it(
    app: PayorchApp, client: Client, db: Database, settings: Settings, webhook_receiver: WebhookReceiver
) -> None:
    victim, config, delivery = await ended_delivery(client, db, settings, webhook_receiver, "DELIVERED")
    attacker = await new_merchant(client, db, settings)
    console, csrf = await signed_in_browser(app, attacker.email)
    path = delivery_page(victim.application_id, config, delivery)
    response, html = await page(console, path)
    assert response.status_code == 404
    assert delivery["eventId"] not in html and webhook_receiver.url not in html
    response, _ = await submit(console, f"{path}/retry", {"csrf_token": csrf, "back": "delivery"})
    assert response.status_code == 404
    assert len(webhook_receiver.requests) == 1
