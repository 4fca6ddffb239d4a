"""Reconciling an application's sandbox account in a real browser, with the keyboard alone: from the
application's navigation to the reconciliation page, a day mistyped in the form shown beside its
field, the run started and its page showing the discrepancy with what to do about it. Every page
visited is checked as every browser test checks its pages."""

from __future__ import annotations

import pytest
from selenium.common.exceptions import WebDriverException
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.remote.webdriver import WebDriver

from payorch.config import Settings
from payorch.storage.database import Database
from tests.browser.driver import Browser
from tests.browser.pages import check_page
from tests.browser.plugin import LiveService
from tests.browser.test_console import notice, press, replace_text, sign_in, text_of, titled
from tests.clock import ShiftedClock
from tests.helpers import Client, new_shop
from tests.reconciliation.test_observed_fees import settings as observed_settings
from tests.reconciliation.test_sandbox_runs import paid_session, today

pytestmark = pytest.mark.browser
settings = observed_settings  # the sandbox settles the day it is paid


async def test_an_admin_starts_a_reconciliation_and_reads_its_discrepancy_with_the_keyboard_alone(
    browser: Browser,
    live_service: LiveService,
    client: Client,
    db: Database,
    settings: Settings,
    clock: ShiftedClock,
) -> None:
    shop = await new_shop(client, db, settings)
    await paid_session(client, shop, "4000000000000077")  # settled 1% short
    await sign_in(browser, live_service, shop.merchant)
    await browser.open(live_service.url(f"/console/applications/{shop.application_id}"))
    await browser.wait_for(titled("Shop"))
    await press(browser, 'nav.sections a[href$="/reconciliations"]', Keys.ENTER)
    await browser.wait_for(titled("Reconciliation"))
    assert "No run yet." in await text_of(browser, "main")
    await check_page(browser, "reconciliations-empty")

    day = today(clock)
    await replace_text(browser, "#from", "2026-13-01")
    await browser.keys(Keys.ENTER)
    error = await browser.wait_for(
        lambda driver: (found := driver.find_elements("id", "from-error")) and found[0].text
    )
    assert error == "is not a day (YYYY-MM-DD)"
    await check_page(browser, "reconciliations-refused", status=400)

    await replace_text(browser, "#from", day)
    await replace_text(browser, "#to", day)
    await browser.keys(Keys.ENTER)
    await browser.wait_for(titled("Reconciliation run"))
    assert "Started" in await notice(browser)

    def completed(driver: WebDriver) -> bool:
        try:
            if driver.find_element(By.ID, "run-status").text == "Completed":
                return True
            driver.refresh()  # as a person waiting for the run does
        except WebDriverException:  # the page went away while it was read: read the next one
            pass
        return False

    await browser.wait_for(completed)
    assert "What to do: Ask the provider why it settled another amount" in await text_of(browser, "main")
    await check_page(browser, "reconciliation-run")
