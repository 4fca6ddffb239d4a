"""The sandbox's hosted checkout page in a real browser: a customer pays with the keyboard alone by
card (after a decline, too) and by BLIK, and payorch's result page then says the payment arrived."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from payorch.config import Settings
from payorch.storage.database import Database
from tests.browser.driver import Browser
from tests.browser.pages import check_page
from tests.browser.plugin import LiveService
from tests.helpers import Client, Shop, create_session, new_shop, session_body

pytestmark = pytest.mark.browser

CARD_FIELD = "#card_number"
BLIK_FIELD = "#blik_code"
SUCCESS_CARD = "4242 4242 4242 4242"  # with spaces, as a person types it
DECLINED_CARD = "4000000000000002"


@pytest.fixture
async def shop(client: Client, db: Database, settings: Settings) -> Shop:
    return await new_shop(client, db, settings)


async def _session(client: Client, shop: Shop, **change: Any) -> dict[str, Any]:
    response = await create_session(client, shop, str(uuid.uuid4()), session_body(total="1234.50", **change))
    assert response.status_code == 201, await response.get_data(as_text=True)
    created: dict[str, Any] = await response.get_json()
    return created


async def _open_checkout(browser: Browser, live_service: LiveService, created: dict[str, Any]) -> None:
    await browser.open(live_service.url(created["checkoutUrl"]))
    assert await browser.heading() == "Sandbox checkout"
    assert "1,234.50 PLN" in await browser.text()


async def _result_page(browser: Browser, live_service: LiveService, session_id: str) -> str:
    """payorch's result page for the session, once it has left 'Confirming' (it refreshes itself)."""
    await browser.open(live_service.url(f"/checkout/{session_id}/result"))
    heading: str = await browser.wait_for(
        lambda driver: (title := driver.title) != "Confirming your payment" and title
    )
    return heading


async def test_a_customer_pays_by_card_with_the_keyboard_alone_and_the_result_page_says_so(
    client: Client, shop: Shop, browser: Browser, live_service: LiveService
) -> None:
    created = await _session(client, shop)
    await _open_checkout(browser, live_service, created)
    await check_page(browser, "checkout-card")

    await browser.fill_with_keyboard(CARD_FIELD, SUCCESS_CARD)
    await browser.wait_for(lambda driver: driver.title == "Payment succeeded")
    assert "Thank you: the payment succeeded." in await browser.text()
    await check_page(browser, "checkout-card-paid")

    assert await _result_page(browser, live_service, created["sessionId"]) == "Payment received"
    assert "1,234.50 PLN" in await browser.text()
    await check_page(browser, "result-paid")


async def test_a_declined_card_shows_the_reason_and_a_retry_with_another_card_pays(
    client: Client, shop: Shop, browser: Browser, live_service: LiveService
) -> None:
    created = await _session(client, shop)
    await _open_checkout(browser, live_service, created)

    await browser.fill_with_keyboard(CARD_FIELD, DECLINED_CARD)
    await browser.wait_for(lambda driver: driver.title == "Payment declined")
    assert "CARD_DECLINED" in await browser.text()
    await check_page(browser, "checkout-declined", status=402)  # the declined page answers 402

    await browser.fill_with_keyboard(CARD_FIELD, SUCCESS_CARD)
    await browser.wait_for(lambda driver: driver.title == "Payment succeeded")
    await check_page(browser, "checkout-retry-paid")
    assert await _result_page(browser, live_service, created["sessionId"]) == "Payment received"


async def test_a_customer_pays_with_a_blik_code(
    client: Client, shop: Shop, browser: Browser, live_service: LiveService
) -> None:
    created = await _session(client, shop, method="blik")
    await _open_checkout(browser, live_service, created)
    assert "BLIK" in await browser.text()
    await check_page(browser, "checkout-blik")

    await browser.fill_with_keyboard(BLIK_FIELD, "777123")
    await browser.wait_for(lambda driver: driver.title == "Payment succeeded")
    await check_page(browser, "checkout-blik-paid")
    assert await _result_page(browser, live_service, created["sessionId"]) == "Payment received"
