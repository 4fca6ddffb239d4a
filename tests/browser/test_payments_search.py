"""The console's Payments page in a real browser, with the keyboard alone: from the header's link to
the list of every application's payments, then a search by order reference that narrows it, at an
address that keeps the filter."""

from __future__ import annotations

import uuid

import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys

from payorch.config import Settings
from payorch.storage.database import Database
from tests.browser.driver import Browser
from tests.browser.pages import check_page
from tests.browser.plugin import LiveService
from tests.browser.test_console import press, sign_in, titled
from tests.helpers import Client, Shop, create_session, new_shop, session_body

pytestmark = pytest.mark.browser


@pytest.fixture
async def shop(client: Client, db: Database, settings: Settings) -> Shop:
    return await new_shop(client, db, settings)


async def new_session(client: Client, shop: Shop, reference: str, email: str) -> str:
    body = session_body(orderReference=reference, customer={"email": email})
    response = await create_session(client, shop, f"k-{uuid.uuid4()}", body)
    assert response.status_code == 201, await response.get_data(as_text=True)
    return str((await response.get_json())["sessionId"])


async def listed_references(browser: Browser) -> list[str]:
    return await browser.run(
        lambda driver: [
            cell.text.splitlines()[0]
            for cell in driver.find_elements(By.CSS_SELECTOR, "table.payments tbody td:first-child")
        ]
    )


async def test_an_admin_searches_the_payments_by_order_reference_with_the_keyboard_alone(
    browser: Browser, live_service: LiveService, client: Client, shop: Shop
) -> None:
    await new_session(client, shop, "order-1001", "ann@example.com")
    await new_session(client, shop, "order-2002", "bob@example.com")
    await sign_in(browser, live_service, shop.merchant)

    await press(browser, 'nav.console-sections a[href$="/payments"]', Keys.ENTER)
    await browser.wait_for(titled("Payments"))
    await check_page(browser, "payments")
    assert await listed_references(browser) == ["order-2002", "order-1001"]

    await browser.fill_with_keyboard("#orderReference", "order-1001")
    await browser.wait_for(lambda driver: "orderReference=order-1001" in driver.current_url)
    await check_page(browser, "payments-searched")
    assert await listed_references(browser) == ["order-1001"]
    assert "ann@example.com" in await browser.text()
