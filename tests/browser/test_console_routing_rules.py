"""Building a routing rule in a real browser, with the keyboard alone: from the routing page to the
rules form, a rule added with a condition and a priority route, a mistake shown beside its input,
the rule stored and shown in force; then the versions and the difference of the two. Every page
visited is checked as every browser test checks its pages."""

from __future__ import annotations

import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys

from payorch.config import Settings
from payorch.storage.database import Database
from tests.browser.driver import Browser
from tests.browser.pages import check_page
from tests.browser.plugin import LiveService
from tests.browser.test_console import notice, open_section, press, sign_in, text_of, titled
from tests.helpers import Client, new_shop, put_routing

pytestmark = pytest.mark.browser


async def test_an_admin_builds_a_routing_rule_in_the_form_with_the_keyboard_alone(
    browser: Browser, live_service: LiveService, client: Client, db: Database, settings: Settings
) -> None:
    shop = await new_shop(client, db, settings)
    await put_routing(client, shop, {"objective": "approval"})
    await sign_in(browser, live_service, shop.merchant)
    await browser.open(live_service.url(f"/console/applications/{shop.application_id}"))
    await browser.wait_for(titled("Shop"))
    await open_section(browser, "Routing")
    await press(browser, 'a[href$="/routing/rules"]', Keys.ENTER)
    await browser.wait_for(titled("Routing rules"))
    await check_page(browser, "routing-rules-empty")

    await press(browser, 'button[value="add-rule"]', Keys.ENTER)
    await browser.wait_for(lambda driver: driver.find_elements(By.ID, "rule-0-name"))
    await press(browser, "#rule-0-name", "pln-first")
    await press(browser, 'button[value="add-condition-0"]', Keys.ENTER)
    await browser.wait_for(lambda driver: driver.find_elements(By.ID, "rule-0-condition-0-field"))
    assert await browser.run(
        lambda driver: driver.find_element(By.ID, "rule-0-name").get_property("value")
    ) == ("pln-first")  # the form kept what was typed
    await press(browser, "#rule-0-condition-0-field", "c")  # "currency is one of"
    await browser.keys(Keys.TAB, "PLN")
    await press(browser, "#rule-0-type", "p")  # "priority: the providers in this order"
    await browser.keys(Keys.TAB, Keys.ENTER)  # no provider yet: Enter stores, and is refused
    error = await browser.wait_for(
        lambda driver: (found := driver.find_elements(By.ID, "rule-0-providers-error")) and found[0].text
    )
    assert error == "must list at least one provider"
    await check_page(browser, "routing-rules-refused", status=400)

    await press(browser, "#rule-0-providers", "sandbox", Keys.ENTER)
    assert "Saved" in await notice(browser)
    assert await text_of(browser, "#routing-version") == "2"
    assert "pln-first currency PLN priority: sandbox, in this order" in await text_of(
        browser, "table.routing-rules"
    )

    await press(browser, 'a[href$="/routing/versions"]', Keys.ENTER)
    await browser.wait_for(titled("Routing versions"))
    assert shop.merchant.email in await text_of(browser, "table.routing-versions")
    await check_page(browser, "routing-versions")
    await press(browser, 'a[href$="/routing/versions/diff?from=1&to=2"]', Keys.ENTER)
    await browser.wait_for(titled("Routing versions 1 and 2"))
    assert "+ added" in await text_of(browser, "table.routing-diff")
    await check_page(browser, "routing-versions-diff")
