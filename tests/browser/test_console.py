"""The merchant console in a real browser, driven with the keyboard alone as a person would: sign
in, create an application and its API key, link the sandbox, take a payment on the sandbox's
checkout page, see it SUCCEEDED, refund half, and see the refund COMPLETED and the webhooks
delivered. Every page visited is screenshot, and checked for unlabelled fields and console errors."""

from __future__ import annotations

from typing import Any

import pytest
from selenium.common.exceptions import WebDriverException
from selenium.webdriver.common.action_chains import ActionChains
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.remote.webdriver import WebDriver

from payorch.config import Settings
from payorch.storage.database import Database
from payorch.values.secrets import looks_like_api_key
from tests import webhook_receiver as receiving
from tests.browser.driver import Browser
from tests.browser.pages import check_page
from tests.browser.plugin import LiveService
from tests.helpers import (
    PASSWORD,
    SANDBOX_KEY,
    Client,
    Merchant,
    Shop,
    create_session,
    eventually,
    new_merchant,
    new_shop,
    session_body,
)
from tests.http.test_refunds import paid_session
from tests.webhook_receiver import WebhookReceiver

pytestmark = pytest.mark.browser
webhook_receiver = receiving.webhook_receiver
TEST_CARD = "4242 4242 4242 4242"  # as a person types it, with spaces


@pytest.fixture
def settings(settings: Settings, webhook_receiver: WebhookReceiver) -> Settings:
    """payorch trusts the test receiver's CA, as a deployment trusts the merchants' endpoints' CAs."""
    webhooks = settings.webhooks.model_copy(update={"ca_bundle": webhook_receiver.ca_path})
    return settings.model_copy(update={"webhooks": webhooks})


@pytest.fixture
async def merchant(client: Client, db: Database, settings: Settings) -> Merchant:
    return await new_merchant(client, db, settings)


def titled(title: str) -> object:
    """A wait condition: the page's title is `title` (each console page's is "<h1> · payorch console")."""

    def condition(driver: WebDriver) -> bool:
        return bool(driver.title == f"{title} · payorch console")

    return condition


async def sign_in(browser: Browser, live_service: LiveService, merchant: Merchant) -> None:
    await browser.open(live_service.url("/console"))
    await browser.wait_for(titled("Sign in"))
    await check_page(browser, "sign-in")
    await browser.tab_to("#email")
    await browser.keys(merchant.email, Keys.TAB, PASSWORD, Keys.ENTER)
    await browser.wait_for(titled("Applications"))


async def test_an_admin_signs_in_and_creates_an_application_and_a_key_with_the_keyboard_alone(
    browser: Browser, live_service: LiveService, merchant: Merchant
) -> None:
    await sign_in(browser, live_service, merchant)
    await check_page(browser, "applications-empty")

    await browser.fill_with_keyboard("#name", "Web shop")
    await browser.wait_for(titled("Web shop"))
    await check_page(browser, "application")

    await browser.fill_with_keyboard("#key-description", "web shop server")
    await browser.wait_for(titled("New API key"))
    key = await browser.run(lambda driver: driver.find_element(By.ID, "new-key").text)
    assert looks_like_api_key(key), key
    await check_page(browser, "api-key-created")


async def press(browser: Browser, css: str, *keys: str) -> None:
    """Tab to the element `css` selects, then press `keys` (Enter follows a link or submits, Space ticks)."""
    await browser.tab_to(css)
    await browser.keys(*keys)


async def open_section(browser: Browser, title: str) -> None:
    """Follow the application's navigation link to the page `title` with the keyboard."""
    await press(browser, f'nav.sections a[href$="/{title.lower()}"]', Keys.ENTER)
    await browser.wait_for(titled(title))


async def text_of(browser: Browser, css: str) -> str:
    return await browser.run(lambda driver: str(driver.find_element(By.CSS_SELECTOR, css).text))


async def reload_until(browser: Browser, shown: str, timeout_s: float = 15.0) -> None:
    """Reload the page until its text includes `shown`, as a person waiting for an outcome does."""

    def condition(driver: WebDriver) -> bool:
        try:
            if shown in driver.find_element(By.TAG_NAME, "body").text:
                return True
            driver.refresh()
        except WebDriverException:  # the page went away while it was read: read the next one
            pass
        return False

    await browser.wait_for(condition, timeout_s=timeout_s)


async def copied_with_the_button(browser: Browser, live_service: LiveService) -> str:
    """Press the copy button with the keyboard; what the clipboard then holds. (Headless Chromium
    lets a page use the clipboard once the test grants it, as a person's browser asks them to.)"""
    await browser.run(
        lambda driver: driver.execute_cdp_cmd(
            "Browser.grantPermissions",
            {
                "origin": live_service.base_url,
                "permissions": ["clipboardReadWrite", "clipboardSanitizedWrite"],
            },
        )
    )
    await press(browser, "button[data-copy]", Keys.ENTER)
    await browser.wait_for(
        lambda driver: driver.find_element(By.ID, "copy-status").text == "Copied to the clipboard."
    )
    held: str = await browser.run(
        lambda driver: driver.execute_async_script(
            "navigator.clipboard.readText().then(arguments[0], (error) => arguments[0](String(error)))"
        )
    )
    return held


async def notice(browser: Browser) -> str:
    """The text of the notice a form's answer shows (`role="status"`), once the answer has arrived."""
    found: str = await browser.wait_for(
        lambda driver: (
            (found := driver.find_elements(By.CSS_SELECTOR, 'main [role="status"]')) and found[0].text
        )
    )
    return found


async def test_an_admin_takes_a_payment_and_refunds_half_of_it_from_the_console_with_the_keyboard_alone(
    browser: Browser,
    live_service: LiveService,
    merchant: Merchant,
    client: Client,
    webhook_receiver: WebhookReceiver,
) -> None:
    await sign_in(browser, live_service, merchant)
    await browser.fill_with_keyboard("#name", "Web shop")
    await browser.wait_for(titled("Web shop"))
    application_id = (await browser.current_url()).split("?")[0].rsplit("/", 1)[1]
    await browser.fill_with_keyboard("#key-description", "web shop server")
    await browser.wait_for(titled("New API key"))
    key = await text_of(browser, "#new-key")
    assert await copied_with_the_button(browser, live_service) == key
    await press(browser, "main > p:last-child a", Keys.ENTER)  # back to the application
    await browser.wait_for(titled("Web shop"))

    # Link the sandbox: tick card, type its key, press Enter.
    await open_section(browser, "Providers")
    await check_page(browser, "providers-none-linked")
    await press(browser, "#link-sandbox-method-card", Keys.SPACE)
    await press(browser, "#link-sandbox-apiKey", SANDBOX_KEY, Keys.ENTER)
    assert "Sandbox" in await notice(browser)
    assert SANDBOX_KEY not in await browser.text()
    await check_page(browser, "providers-sandbox-linked")

    # A webhook configuration pointing at the merchant's HTTPS endpoint: its secret is shown once.
    await open_section(browser, "Webhooks")
    await browser.fill_with_keyboard("#url", webhook_receiver.url)
    await browser.wait_for(titled("New signing secret"))
    webhook_receiver.accept_secret(await text_of(browser, "#new-secret"))
    await check_page(browser, "webhook-secret-shown-once")

    # The merchant's server creates a session with the key; the customer pays by typing the card.
    shop = Shop(merchant=merchant, application_id=application_id, api_key=key)
    response = await create_session(
        client, shop, "order-42", session_body(total="1234.50", orderReference="order-42")
    )
    assert response.status_code == 201, await response.get_data(as_text=True)
    created: dict[str, Any] = await response.get_json()
    await browser.open(live_service.url(created["checkoutUrl"]))
    await browser.fill_with_keyboard("#card_number", TEST_CARD)
    await browser.wait_for(lambda driver: driver.title == "Payment succeeded")

    # The console shows it SUCCEEDED.
    await browser.open(live_service.url(f"/console/applications/{application_id}"))
    await browser.wait_for(titled("Web shop"))
    await open_section(browser, "Sessions")
    await reload_until(browser, "Succeeded")
    await check_page(browser, "sessions")
    await press(browser, f'a[href$="/console/sessions/{created["sessionId"]}"]', Keys.ENTER)
    await browser.wait_for(titled("Session order-42"))
    assert "1,234.50 PLN" in await browser.text() or "1234.50 PLN" in await browser.text()
    await check_page(browser, "session-paid")

    # Refund half: the amount typed (nothing is filled in), Enter, then the confirmation naming it.
    await press(browser, "#amount", "617.25", Keys.ENTER)
    await browser.wait_for(lambda driver: driver.find_elements(By.ID, "refund-confirm-text"))
    confirmation = await text_of(browser, "#refund-confirm-text")
    assert confirmation.startswith("Refund 617.25 PLN of session order-42 (")
    await check_page(browser, "session-refund-confirm")
    await press(browser, "#refund-confirm-button", Keys.ENTER)
    assert "Refund of 617.25 PLN requested" in await notice(browser)
    await reload_until(browser, "Completed")
    page_text = await browser.text()
    assert "Partially refunded" in page_text
    assert await browser.run(
        lambda driver: driver.find_element(
            By.CSS_SELECTOR, "dd.session-partially_refunded span"
        ).get_attribute("title")
    ) == ("PARTIALLY_REFUNDED")
    await check_page(browser, "session-refunded-half")

    # The webhooks reached the endpoint, and the delivery log shows them delivered.
    delivered = await webhook_receiver.wait_for(2, timeout_s=15)
    assert all(request.verified for request in delivered)
    await browser.open(live_service.url(f"/console/applications/{application_id}/webhooks"))
    await browser.wait_for(titled("Webhooks"))
    await press(browser, "a.webhook-url", Keys.ENTER)
    await browser.wait_for(titled("Webhook configuration"))
    await reload_until(browser, "refund.completed")
    log = await browser.text()
    assert "session.completed" in log
    assert log.count("Delivered") >= 2, log
    await check_page(browser, "webhook-deliveries")
    assert await eventually(lambda: _delivered(webhook_receiver, "refund.completed"))

    # A test event from the configuration's page shows the endpoint's answer.
    await press(browser, "form[action$='/test'] button", Keys.ENTER)
    await browser.wait_for(titled("Test event sent"))
    assert "Succeeded" in await notice(browser)
    await check_page(browser, "webhook-test-sent")

    # The applications page now draws the last 30 days: one paid session, one refund in PLN.
    await browser.open(live_service.url("/console/applications"))
    await browser.wait_for(titled("Applications"))
    assert (
        await browser.run(lambda driver: len(driver.find_elements(By.CSS_SELECTOR, 'svg[role="img"]'))) >= 1
    )
    await check_page(browser, "applications-activity")


async def replace_text(browser: Browser, css: str, text: str) -> None:
    """Tab to the text area `css`, select all it holds (Ctrl+A) and type `text` over it."""
    await browser.tab_to(css)
    await browser.run(
        lambda driver: (
            ActionChains(driver)
            .key_down(Keys.CONTROL)
            .send_keys("a")
            .key_up(Keys.CONTROL)
            .send_keys(text)
            .perform()
        )
    )


async def test_an_admin_reads_and_changes_the_routing_and_tries_a_session_with_the_keyboard_alone(
    browser: Browser, live_service: LiveService, client: Client, db: Database, settings: Settings
) -> None:
    shop = await new_shop(client, db, settings)
    await paid_session(client, shop)
    await sign_in(browser, live_service, shop.merchant)
    await browser.open(live_service.url(f"/console/applications/{shop.application_id}"))
    await browser.wait_for(titled("Shop"))
    await open_section(browser, "Routing")
    assert await text_of(browser, "#routing-version") == "0: the default, no document stored yet"
    await browser.wait_for(lambda driver: driver.find_elements(By.CSS_SELECTOR, "table.routing-rates"))
    assert "1 (1 paid, 0 declined, 0 abandoned)" in await text_of(browser, "table.routing-rates")
    await check_page(browser, "routing-default")

    # A rule without a name: refused with the API's message at its place, nothing stored.
    await replace_text(browser, "#document", '{"rules": [{"name": "", "route": {"type": "dynamic"}}]}')
    await browser.keys(Keys.TAB, Keys.ENTER)
    problems = await browser.wait_for(
        lambda driver: (
            (found := driver.find_elements(By.CSS_SELECTOR, "#document-error li")) and found[0].text
        )
    )
    assert problems.startswith("rules.0.name: "), problems
    await check_page(browser, "routing-refused", status=400)

    # Corrected: stored as version 1, the page says so and shows the rule.
    document = (
        '{"rules": [{"name": "sandbox-first", "route": {"type": "priority", "providers": ["sandbox"]}}]}'
    )
    await replace_text(browser, "#document", document)
    await browser.keys(Keys.TAB, Keys.ENTER)
    assert "Saved" in await notice(browser)
    assert await text_of(browser, "#routing-version") == "1"
    assert "sandbox-first" in await text_of(browser, "table.routing-rules")
    await check_page(browser, "routing-stored")

    # Backtest a candidate over the last 7 days without storing it: past "Store this document" to
    # the days (typing 7 chooses "7 days"), then the second button.
    candidate = '{"default": {"type": "priority", "providers": ["sandbox"]}}'
    await replace_text(browser, "#document", candidate)
    await browser.keys(Keys.TAB, Keys.TAB, "7", Keys.TAB, Keys.ENTER)
    summary = await browser.wait_for(
        lambda driver: (found := driver.find_elements(By.ID, "backtest-summary")) and found[0].text
    )
    assert summary == (
        "This document sends 0 of the 1 session replayed first to another provider than the document "
        "in force (version 1) does."
    )
    assert "sandbox 1 1 1 1 (1 paid) 100.0%" in await text_of(browser, "table.backtest-providers")
    assert "default route 1 0 0" in await text_of(browser, "table.backtest-rules")
    assert await text_of(browser, "#routing-version") == "1"  # nothing stored
    assert await browser.run(lambda driver: driver.find_element(By.ID, "document").get_property("value")) == (
        candidate
    )
    assert await browser.run(
        lambda driver: driver.find_element(By.ID, "backtest-days").get_property("value")
    ) == ("7")
    await check_page(browser, "routing-backtested")

    # Try a session of 250.00 PLN by card: the rule sends it to the sandbox first.
    await press(browser, "#evaluate-amount", "250.00", Keys.TAB, "PLN", Keys.TAB, "PL", Keys.ENTER)
    selected = await browser.wait_for(
        lambda driver: (found := driver.find_elements(By.ID, "evaluation-selected")) and found[0].text
    )
    assert selected == "It would go first to sandbox."
    assert "sandbox-first" in await text_of(browser, "section.evaluation")
    await check_page(browser, "routing-evaluated")


async def _delivered(receiver: WebhookReceiver, event_type: str) -> bool | None:
    return any(request.json().get("type") == event_type for request in receiver.requests_to("/hooks")) or None


async def test_every_kind_of_console_page_has_labelled_fields_and_no_console_errors(
    browser: Browser,
    live_service: LiveService,
    client: Client,
    db: Database,
    settings: Settings,
    webhook_receiver: WebhookReceiver,
) -> None:
    """The pages the story above does not reach: refusals, answers to forms, errors, filters."""
    shop = await new_shop(client, db, settings)
    app_id = shop.application_id
    hook = await client.post(
        f"/api/v1/applications/{app_id}/webhooks",
        json={"url": webhook_receiver.url},
        headers=shop.merchant.headers,
    )
    webhook = await hook.get_json()
    session_id = await paid_session(client, shop)

    # A wrong password: the form again, with the API's message as an alert.
    await browser.open(live_service.url("/console/sign-in"))
    await browser.tab_to("#email")
    await browser.keys(shop.merchant.email, Keys.TAB, "not the password", Keys.ENTER)
    await browser.wait_for(lambda driver: driver.find_elements(By.CSS_SELECTOR, '[role="alert"]'))
    await check_page(browser, "sign-in-refused", status=401)
    await sign_in(browser, live_service, shop.merchant)

    visits = {
        "application-with-a-key": (f"/console/applications/{app_id}", None),
        "sessions-filtered": (
            f"/console/applications/{app_id}/sessions?status=SUCCEEDED&from=2026-01-01",
            None,
        ),
        "sessions-bad-filter": (f"/console/applications/{app_id}/sessions?from=yesterday", 400),
        "webhook": (f"/console/applications/{app_id}/webhooks/{webhook['id']}", None),
        "routing-with-rates": (f"/console/applications/{app_id}/routing", None),
        "no-such-session": ("/console/sessions/00000000-0000-4000-8000-000000000000", 404),
    }
    for name, (path, status) in visits.items():
        await browser.open(live_service.url(path))
        await check_page(browser, name, status=status)
    assert "No such session" in await browser.text()

    # Forms answered with a refusal or a result: each a page of its own.
    await browser.open(live_service.url(f"/console/sessions/{session_id}"))
    await press(browser, "#amount", "100000", Keys.ENTER)  # more than was paid: refused at the review
    await browser.wait_for(lambda driver: driver.find_elements(By.CSS_SELECTOR, '[role="alert"]'))
    assert "remains to refund" in await browser.text()
    await check_page(browser, "refund-refused", status=400)

    await browser.open(live_service.url(f"/console/applications/{app_id}/providers"))
    await press(browser, "#key-sandbox-apiKey", "not a sandbox key", Keys.ENTER)
    await browser.wait_for(lambda driver: driver.find_elements(By.CSS_SELECTOR, '[role="alert"], .error'))
    await check_page(browser, "provider-key-refused", status=422)

    await browser.open(live_service.url(f"/console/applications/{app_id}/routing"))
    await press(browser, "#evaluate-amount", "12,50", Keys.TAB, "PLN", Keys.ENTER)  # a comma
    await browser.wait_for(lambda driver: driver.find_elements(By.ID, "evaluate-amount-error"))
    await check_page(browser, "routing-evaluate-refused", status=400)

    await browser.open(live_service.url(f"/console/applications/{app_id}/routing"))
    await replace_text(browser, "#document", '{"rules": 1}')
    await press(browser, "button[formaction$='/backtest#backtest']", Keys.ENTER)
    await browser.wait_for(lambda driver: driver.find_elements(By.ID, "backtest-refused"))
    assert "rules: must be a list of rules" in await text_of(browser, "#document-error")
    await check_page(browser, "routing-backtest-refused", status=400)

    await browser.open(live_service.url(f"/console/applications/{app_id}/webhooks/{webhook['id']}"))
    await press(browser, "form[action$='/secret'] button", Keys.ENTER)
    await browser.wait_for(titled("Signing secret rotated"))
    await check_page(browser, "webhook-secret-rotated")

    # Deleting asks first, on a page of its own; confirming it empties the list.
    await browser.open(live_service.url(f"/console/applications/{app_id}/webhooks/{webhook['id']}"))
    await press(browser, "form[action$='/delete'] button", Keys.ENTER)
    await browser.wait_for(titled("Delete this webhook configuration?"))
    await check_page(browser, "webhook-delete-confirm")
    await press(browser, "button[name='confirm'][value='yes']", Keys.ENTER)
    await browser.wait_for(titled("Webhooks"))
    assert "was deleted" in await notice(browser)
    await check_page(browser, "webhooks-after-delete")
