"""The console's first hour in a real browser, with the keyboard alone: each creation says what
comes next and links to it (an API key, the sandbox, a webhook endpoint, a test payment); the test
payment opens the sandbox's checkout, where the test card pays it. Times read in the browser's time
zone and statuses in words, the exact values on hover; disabling an application asks first.

Its screenshots `application-created`, `link-the-sandbox`, `try-a-test-payment` and
`disable-confirm` are the ones the README and docs/console.md show (docs/images/console-*.png)."""

from __future__ import annotations

import re
from datetime import datetime
from zoneinfo import ZoneInfo

import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys

from payorch.config import Settings
from payorch.http.console.display import MONTHS
from payorch.storage.database import Database
from tests import webhook_receiver as receiving
from tests.browser import test_console as console
from tests.browser.driver import Browser
from tests.browser.pages import check_page
from tests.browser.plugin import LiveService
from tests.browser.test_console import notice, press, reload_until, sign_in, text_of, titled
from tests.helpers import SANDBOX_KEY, Client, Merchant, new_shop
from tests.http.test_refunds import paid_session
from tests.webhook_receiver import WebhookReceiver

pytestmark = pytest.mark.browser
webhook_receiver = receiving.webhook_receiver
settings = console.settings  # payorch trusts the test receiver's CA
merchant = console.merchant
TEST_CARD = console.TEST_CARD
LOCAL_ZONE = "Europe/Warsaw"


async def next_step(browser: Browser) -> str:
    """The step the page says comes next (`Next: ...`)."""
    return await text_of(browser, "p.next-step a")


async def follow_next_step(browser: Browser, title: str) -> None:
    """Follow the link to the next step (the notice's, or the overview's list of steps)."""
    await press(browser, "p.next-step a, li.step-next a", Keys.ENTER)
    await browser.wait_for(titled(title))


async def steps(browser: Browser) -> list[str]:
    """The overview's steps as they read, without their hints."""
    items = await browser.run(
        lambda driver: [
            item.find_element(By.CLASS_NAME, "step-state").text
            + " "
            + (item.find_elements(By.TAG_NAME, "a") or [item])[0].text.split(": ")[-1]
            for item in driver.find_elements(By.CSS_SELECTOR, "ol.steps li")
        ]
    )
    return list(items)


async def test_a_new_admin_follows_the_next_steps_to_a_test_payment_with_the_keyboard_alone(
    browser: Browser,
    live_service: LiveService,
    merchant: Merchant,
    client: Client,
    webhook_receiver: WebhookReceiver,
) -> None:
    await sign_in(browser, live_service, merchant)

    # An application, described in a sentence: its page says so, and what comes next.
    await browser.tab_to("#name")
    await browser.keys("Web shop", Keys.TAB, "The web shop's checkout, for customers in Poland", Keys.TAB)
    await browser.keys(Keys.ENTER)
    await browser.wait_for(titled("Web shop"))
    application_id = (await browser.current_url()).split("?")[0].rsplit("/", 1)[1]
    assert await notice(browser) == "The application is created."
    assert await text_of(browser, ".description-text") == "The web shop's checkout, for customers in Poland"
    assert await steps(browser) == [
        "Done: Create an application",
        "Next: Create an API key",
        "Then: Link a provider",
        "Then: Add a webhook endpoint",
        "Then: Try a test payment",
    ]
    await check_page(browser, "application-created")

    # Next: an API key, on the same page.
    await follow_next_step(browser, "Web shop")
    await browser.fill_with_keyboard("#key-description", "web shop server")
    await browser.wait_for(titled("New API key"))
    assert await next_step(browser) == "Link a provider"
    await check_page(browser, "api-key-created-next")

    # Next: the sandbox, whose key field says what its keys look like.
    await follow_next_step(browser, "Providers")
    hint = await text_of(browser, "#link-sandbox-apiKey-hint")
    assert hint.startswith("sk_sandbox_ followed by 8 or more letters, digits or _"), hint
    await check_page(browser, "link-the-sandbox")
    await press(browser, "#link-sandbox-method-card", Keys.SPACE)
    await press(browser, "#link-sandbox-apiKey", SANDBOX_KEY, Keys.ENTER)
    said = await notice(browser)
    assert "Sandbox (test mode) is linked." in said
    assert "Next: Add a webhook endpoint" in said
    await check_page(browser, "sandbox-linked-next")

    # Next: a webhook endpoint, whose signing secret is shown once.
    await follow_next_step(browser, "Webhooks")
    await browser.fill_with_keyboard("#url", webhook_receiver.url)
    await browser.wait_for(titled("New signing secret"))
    webhook_receiver.accept_secret(await text_of(browser, "#new-secret"))
    assert await next_step(browser) == "Try a test payment"
    await check_page(browser, "webhook-created-next")

    # Next: a test payment, from the application's overview.
    await follow_next_step(browser, "Web shop")
    assert (await steps(browser))[-1] == "Next: Try a test payment"
    await check_page(browser, "try-a-test-payment")
    await press(browser, "form[action$='/test-payment'] button", Keys.ENTER)
    await browser.wait_for(lambda driver: driver.title == "Sandbox checkout")
    assert "10.00 PLN" in await browser.text()
    await check_page(browser, "test-payment-checkout")
    await browser.fill_with_keyboard("#card_number", TEST_CARD)
    await browser.wait_for(lambda driver: driver.title == "Payment succeeded")

    # Every step is done; the session is the one test payment, paid, and its event was delivered.
    await browser.open(live_service.url(f"/console/applications/{application_id}"))
    await browser.wait_for(titled("Web shop"))
    assert "Getting started" not in await browser.text()
    await press(browser, 'nav.sections a[href$="/sessions"]', Keys.ENTER)
    await browser.wait_for(titled("Sessions"))
    await reload_until(browser, "Succeeded")
    rows = await browser.run(lambda driver: driver.find_elements(By.CSS_SELECTOR, "table tbody tr"))
    assert len(rows) == 1
    assert "10.00 PLN" in await text_of(browser, "table tbody tr")
    status = await browser.run(
        lambda driver: driver.find_element(By.CSS_SELECTOR, "td.session-succeeded span").get_attribute(
            "title"
        )
    )
    assert status == "SUCCEEDED"
    await check_page(browser, "sessions-after-the-test-payment")
    (delivered,) = await webhook_receiver.wait_for(1, timeout_s=15)
    assert delivered.verified
    assert delivered.json()["type"] == "session.completed"


async def test_disabling_an_application_asks_first_with_the_keyboard_alone(
    browser: Browser, live_service: LiveService, client: Client, db: Database, settings: Settings
) -> None:
    shop = await new_shop(client, db, settings)
    await sign_in(browser, live_service, shop.merchant)
    await browser.open(live_service.url(f"/console/applications/{shop.application_id}"))
    await browser.wait_for(titled("Shop"))

    # The button says a question follows; the question changes nothing until answered.
    assert await text_of(browser, "form[action$='/status'] button") == "Disable this application…"
    await press(browser, "form[action$='/status'] button", Keys.ENTER)
    await browser.wait_for(titled("Disable Shop?"))
    assert "Every request made with its API keys is refused (403)" in await browser.text()
    await check_page(browser, "disable-confirm")
    await press(browser, "main form a", Keys.ENTER)  # Cancel: keep it enabled
    await browser.wait_for(titled("Shop"))
    assert await text_of(browser, "dd.status-enabled") == "Enabled"

    # Asked again and confirmed: disabled, and the page says so as a success, not a warning.
    await press(browser, "form[action$='/status'] button", Keys.ENTER)
    await browser.wait_for(titled("Disable Shop?"))
    await press(browser, "button[name='confirm'][value='yes']", Keys.ENTER)
    await browser.wait_for(titled("Shop"))
    assert "The application is disabled" in await notice(browser)
    assert await browser.run(
        lambda driver: driver.find_element(By.CSS_SELECTOR, ".notice-success").get_attribute("role")
    ) == ("status")
    assert await text_of(browser, "dd.status-disabled") == "Disabled: its API keys are refused"
    assert "A disabled application takes no payments" in await browser.text()
    await check_page(browser, "application-disabled")


async def test_times_read_in_the_browsers_time_zone_and_statuses_in_words_the_exact_values_on_hover(
    browser: Browser, live_service: LiveService, client: Client, db: Database, settings: Settings
) -> None:
    shop = await new_shop(client, db, settings)
    session_id = await paid_session(client, shop)
    await sign_in(browser, live_service, shop.merchant)
    await browser.run(
        lambda driver: driver.execute_cdp_cmd("Emulation.setTimezoneOverride", {"timezoneId": LOCAL_ZONE})
    )
    try:
        await browser.open(live_service.url(f"/console/sessions/{session_id}"))
        await browser.wait_for(titled("Session order-1001"))
        created = await browser.run(
            lambda driver: driver.find_element(By.XPATH, "//dt[.='Created']/following-sibling::dd[1]/time")
        )
        exact = await browser.run(lambda _: created.get_attribute("title"))
        assert exact == await browser.run(lambda _: created.get_attribute("datetime"))
        assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", exact), exact
        local = datetime.fromisoformat(exact).astimezone(ZoneInfo(LOCAL_ZONE))
        month = MONTHS[local.month - 1]
        shown = await browser.run(lambda _: created.text)
        assert re.fullmatch(rf"{local.day} {month} {local.year}, {local:%H:%M} CES?T", shown), (shown, exact)
        status = await browser.run(
            lambda driver: driver.find_element(By.CSS_SELECTOR, "dd.session-succeeded span")
        )
        assert await browser.run(lambda _: (status.text, status.get_attribute("title"))) == (
            "Succeeded",
            "SUCCEEDED",
        )
        method = await browser.run(
            lambda driver: driver.find_element(By.XPATH, "//dt[.='Payment method']/following-sibling::dd[1]")
        )
        assert await browser.run(lambda _: method.text) == "Card"
        await check_page(browser, "session-in-local-time")
    finally:
        await browser.run(
            lambda driver: driver.execute_cdp_cmd("Emulation.setTimezoneOverride", {"timezoneId": ""})
        )
