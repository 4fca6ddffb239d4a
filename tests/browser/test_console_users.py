"""Inviting a user in a real browser, with the keyboard alone: the admin opens Users from the
header, invites an address as read-only and is shown the link once; the invited person opens the
link, chooses a name and a password, lands in the console, and sees the users without a form to
change them. Every page visited is checked as every browser test checks its pages."""

from __future__ import annotations

import pytest
from selenium.webdriver.common.keys import Keys

from payorch.config import Settings
from payorch.storage.database import Database
from tests.browser.driver import Browser
from tests.browser.pages import check_page
from tests.browser.plugin import LiveService
from tests.browser.test_console import press, sign_in, text_of, titled
from tests.helpers import PASSWORD, Client, new_merchant

pytestmark = pytest.mark.browser
INVITED = "grace@shop.example"


async def test_an_admin_invites_a_read_only_user_who_joins_with_the_keyboard_alone(
    browser: Browser, live_service: LiveService, client: Client, db: Database, settings: Settings
) -> None:
    admin = await new_merchant(client, db, settings)
    await sign_in(browser, live_service, admin)
    await press(browser, 'header nav a[href="/console/users"]', Keys.ENTER)
    await browser.wait_for(titled("Users"))
    await check_page(browser, "users-admin")

    await press(browser, "#invite-role-read_only", Keys.SPACE)
    await browser.fill_with_keyboard("#email", INVITED)
    await browser.wait_for(titled("Invitation made"))
    await check_page(browser, "user-invited")
    link = (await text_of(browser, "#invite-link")).strip()
    assert "/api/v1/users/signup?token=" in link, link

    await press(browser, "header form button", Keys.ENTER)  # sign out: the invited person's turn
    await browser.wait_for(titled("Sign in"))
    await browser.open(live_service.url(link))
    await browser.wait_for(titled("Join a merchant"))
    assert INVITED in await text_of(browser, "#join-invite")
    await check_page(browser, "join")
    await browser.tab_to("#firstName")
    await browser.keys("Grace", Keys.TAB, "Hopper", Keys.TAB, PASSWORD, Keys.ENTER)
    await browser.wait_for(titled("Applications"))

    await press(browser, 'header nav a[href="/console/users"]', Keys.ENTER)
    await browser.wait_for(titled("Users"))
    shown = await browser.text()
    assert INVITED in shown and admin.email in shown and "Read-only" in shown
    assert "Invite a user" not in shown
    await check_page(browser, "users-read-only")
