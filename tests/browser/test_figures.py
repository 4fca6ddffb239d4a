"""The figures of the last 30 days in a real browser: an application's overview draws its volume,
approval rate and refunds as inline SVG that the browser lays out, each bar titled with its exact
value, and the table of figures opens from the keyboard."""

from __future__ import annotations

from typing import Any

import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.remote.webdriver import WebDriver

from payorch.config import Settings
from payorch.storage.database import Database
from tests.browser.driver import Browser
from tests.browser.pages import check_page
from tests.browser.plugin import LiveService
from tests.browser.test_console import sign_in, titled
from tests.console.test_activity import completed_refund, paid_session
from tests.helpers import Client, new_shop

pytestmark = pytest.mark.browser


def drawn_bars(driver: WebDriver) -> Any:
    """Per chart id, each bar's title and laid-out height in pixels."""
    return driver.execute_script(
        """const charts = {};
        for (const svg of document.querySelectorAll('svg.chart')) {
          charts[svg.id] = [...svg.querySelectorAll('rect.chart-bar')].map(
            (bar) => [bar.querySelector('title').textContent, bar.getBoundingClientRect().height]);
        }
        return charts;"""
    )


async def test_an_applications_overview_shows_its_figures_as_charts_and_a_table(
    browser: Browser, live_service: LiveService, client: Client, db: Database, settings: Settings
) -> None:
    shop = await new_shop(client, db, settings)
    first = await paid_session(client, shop, "100.00")
    await paid_session(client, shop, "50.00")
    await completed_refund(client, shop, first, "10.00")

    await sign_in(browser, live_service, shop.merchant)
    await browser.open(live_service.url(f"/console/applications/{shop.application_id}"))
    await browser.wait_for(titled("Shop"))
    charts = await browser.run(drawn_bars)
    ((volume_title, volume_height),) = charts["chart-volume-PLN"]
    assert volume_title.endswith(": 150.00 PLN in 2 payments")
    assert volume_height > 10  # drawn, not collapsed
    ((refund_title, _),) = charts["chart-refunds"]
    assert refund_title.endswith(": 1 refund (10.00 PLN)")
    label = await browser.run(
        lambda driver: driver.find_element(By.ID, "chart-approval").get_attribute("aria-label")
    )
    assert "sandbox 2 of 2 (100%)" in label
    await check_page(browser, "application-figures")

    # The table behind the pictures, opened with the keyboard.
    await browser.tab_to("#figures details > summary")
    await browser.keys(Keys.ENTER)
    table = await browser.run(lambda driver: driver.find_element(By.ID, "figures-table").text)
    assert "sandbox PLN 2 2 150.00 0 1 10.00" in table
    await check_page(browser, "application-figures-table")
