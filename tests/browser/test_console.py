"""The merchant console in a real browser, driven with the keyboard alone as a person would: sign
in, create an application and its API key, link the sandbox, take a payment on the sandbox's
checkout page, see it SUCCEEDED, refund half, and see the refund COMPLETED and the webhooks
delivered. Every page visited is screenshot, and checked for unlabelled fields and console errors."""

from __future__ import annotations

import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.remote.webdriver import WebDriver

from payorch.config import Settings
from payorch.storage.database import Database
from payorch.values.secrets import looks_like_api_key
from tests.browser.driver import Browser
from tests.browser.pages import check_page
from tests.browser.plugin import LiveService
from tests.helpers import PASSWORD, Client, Merchant, new_merchant

pytestmark = pytest.mark.browser


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
