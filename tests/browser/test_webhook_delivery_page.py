"""A webhook delivery's page in a real browser, driven with the keyboard alone: from the delivery log
to the delivery the endpoint refused with 401, its answer read, then sent again with the button."""

from __future__ import annotations

import pytest
from selenium.webdriver.common.keys import Keys

from payorch.config import Settings
from payorch.storage.database import Database
from tests import webhook_receiver as receiving
from tests.browser.driver import Browser
from tests.browser.pages import check_page
from tests.browser.plugin import LiveService
from tests.browser.test_console import notice, press, reload_until, sign_in, titled
from tests.helpers import Client, eventually, new_shop
from tests.test_webhook_delivery import delivery_in, pay, subscribe
from tests.webhook_receiver import WebhookReceiver

pytestmark = pytest.mark.browser
webhook_receiver = receiving.webhook_receiver


@pytest.fixture
def settings(settings: Settings, webhook_receiver: WebhookReceiver) -> Settings:
    """payorch trusts the test receiver's CA; one attempt per delivery, so a refusal fails it."""
    webhooks = settings.webhooks.model_copy(
        update={"ca_bundle": webhook_receiver.ca_path, "retry_schedule_s": [0]}
    )
    return settings.model_copy(update={"webhooks": webhooks})


async def test_an_admin_reads_a_refused_delivery_and_sends_it_again_with_the_keyboard_alone(
    browser: Browser,
    live_service: LiveService,
    client: Client,
    db: Database,
    settings: Settings,
    webhook_receiver: WebhookReceiver,
) -> None:
    shop = await new_shop(client, db, settings)
    config = await subscribe(client, shop, webhook_receiver)
    webhook_receiver.script([(401, {"www-authenticate": "Bearer"}, b'{"error":"unknown signature"}')])
    await pay(client, shop)
    await eventually(lambda: delivery_in(client, shop, config, "FAILED"))

    await sign_in(browser, live_service, shop.merchant)
    await browser.open(
        live_service.url(f"/console/applications/{shop.application_id}/webhooks/{config['id']}")
    )
    await browser.wait_for(titled("Webhook configuration"))
    await press(browser, "a.delivery-link", Keys.ENTER)
    await browser.wait_for(titled("Delivery of session.completed"))
    shown = await browser.text()
    assert "Attempt 1: HTTP 401" in shown
    assert '{"error":"unknown signature"}' in shown and "www-authenticate" in shown
    assert '"type": "session.completed"' in shown  # the body sent
    await check_page(browser, "webhook-delivery-refused")

    await press(browser, "#resend", Keys.ENTER)
    assert "Queued" in await notice(browser)
    await reload_until(browser, "Attempt 2: HTTP 200")
    await check_page(browser, "webhook-delivery-resent")
    assert len(await webhook_receiver.wait_for(2, timeout_s=10)) == 2
