"""The page a password reset link opens (`payorch reset-password` prints the link), and its form:
the new password set, every earlier session of the admin ended, the admin signed in; a link that is
unknown, used, replaced by a newer one or expired says so and shows no form."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from html import unescape
from typing import Any
from urllib.parse import urlsplit

import pytest

from payorch.config import LimitSettings, Settings
from payorch.engine.accounts.password_resets import issue_password_reset
from payorch.http.services import PayorchApp
from payorch.runtime import open_runtime
from payorch.storage.database import Database
from payorch.values.clock import SYSTEM_CLOCK, Clock
from tests.clock import ShiftedClock
from tests.console.helpers import csrf_of, page, session_cookie
from tests.helpers import PASSWORD, Client, Merchant

NEW_PASSWORD = "a-new-and-longer-secret"


async def _link(db: Database, settings: Settings, email: str, clock: Clock = SYSTEM_CLOCK) -> str:
    """A new reset link for `email`: its path and query."""
    reset = await issue_password_reset(db, settings, email, clock=clock)
    parts = urlsplit(reset.reset_url)
    return f"{parts.path}?{parts.query}"


async def _reset(browser: Client, link: str, password: str = NEW_PASSWORD, again: str | None = None) -> Any:
    """Open the link's page and submit its form: the answer."""
    _, html = await page(browser, link)
    form = {
        "csrf_token": csrf_of(html),
        "password": password,
        "passwordAgain": password if again is None else again,
    }
    return await browser.post(link, form=form)


async def _login(client: Client, email: str, password: str) -> int:
    response = await client.post("/api/v1/auth/login", json={"email": email, "password": password})
    return int(response.status_code)


def _said(html: str, element_id: str) -> str:
    text = html.split(f'id="{element_id}">')[1].split("</p>")[0]
    return " ".join(unescape(re.sub(r"<[^>]+>", "", text)).split())


async def test_the_link_opens_a_page_naming_its_email_and_expiry_asking_the_password_twice(
    app: PayorchApp, db: Database, settings: Settings, merchant: Merchant
) -> None:
    response, html = await page(app.test_client(), await _link(db, settings, merchant.email))
    assert response.status_code == 200
    said = _said(html, "reset-link")
    assert said.startswith(f"This link sets a new password for {merchant.email} and expires ")
    assert "(in 1 hour)" in said or re.search(r"\(in 59 minutes\)", said), said
    assert 'name="password"' in html
    assert 'name="passwordAgain"' in html


async def test_a_reset_signs_the_admin_in_and_only_the_new_password_logs_in(
    app: PayorchApp, client: Client, db: Database, settings: Settings, merchant: Merchant
) -> None:
    browser = app.test_client()
    response = await _reset(browser, await _link(db, settings, merchant.email))
    assert response.status_code == 303, await response.get_data(as_text=True)
    assert response.headers["Location"] == "/console/applications"
    assert session_cookie(response) is not None
    assert (await browser.get("/console/applications")).status_code == 200
    assert await _login(client, merchant.email, NEW_PASSWORD) == 200
    assert await _login(client, merchant.email, PASSWORD) == 401


async def test_after_a_reset_the_admins_earlier_access_token_is_refused(
    app: PayorchApp, client: Client, db: Database, settings: Settings, merchant: Merchant
) -> None:
    assert (await client.get("/api/v1/applications", headers=merchant.headers)).status_code == 200
    response = await _reset(app.test_client(), await _link(db, settings, merchant.email))
    assert response.status_code == 303
    assert (await client.get("/api/v1/applications", headers=merchant.headers)).status_code == 401


async def test_a_link_used_once_says_so_and_cannot_set_a_password_again(
    app: PayorchApp, client: Client, db: Database, settings: Settings, merchant: Merchant
) -> None:
    link = await _link(db, settings, merchant.email)
    first, second = app.test_client(), app.test_client()
    _, html = await page(second, link)  # opened in a second browser before the first uses it
    assert (await _reset(first, link)).status_code == 303
    again = "yet-another-long-secret"
    response = await second.post(
        link, form={"csrf_token": csrf_of(html), "password": again, "passwordAgain": again}
    )
    assert response.status_code == 410
    assert "used already" in await response.get_data(as_text=True)
    assert session_cookie(response) is None
    response, html = await page(second, link)
    assert response.status_code == 410
    assert "<form" not in html.split("<main")[1]
    assert await _login(client, merchant.email, NEW_PASSWORD) == 200
    assert await _login(client, merchant.email, again) == 401


async def test_an_expired_link_says_so_and_changes_nothing(
    app: PayorchApp, client: Client, db: Database, settings: Settings, merchant: Merchant, clock: ShiftedClock
) -> None:
    link = await _link(db, settings, merchant.email, clock)
    browser = app.test_client()
    _, html = await page(browser, link)
    clock.advance(settings.auth.password_reset_ttl_s + 1)
    form = {"csrf_token": csrf_of(html), "password": NEW_PASSWORD, "passwordAgain": NEW_PASSWORD}
    response = await browser.post(link, form=form)
    assert response.status_code == 410
    assert "has expired" in await response.get_data(as_text=True)
    response, html = await page(browser, link)
    assert response.status_code == 410
    assert "<form" not in html.split("<main")[1]
    assert await _login(client, merchant.email, PASSWORD) == 200


async def test_a_newer_link_makes_the_older_unusable(
    app: PayorchApp, db: Database, settings: Settings, merchant: Merchant
) -> None:
    older = await _link(db, settings, merchant.email)
    newer = await _link(db, settings, merchant.email)
    browser = app.test_client()
    response, html = await page(browser, older)
    assert response.status_code == 410
    assert "A newer link was made" in html
    assert (await _reset(browser, newer)).status_code == 303


async def test_an_unknown_link_shows_no_form(app: PayorchApp) -> None:
    response, html = await page(app.test_client(), "/console/reset-password?token=no-such-token")
    assert response.status_code == 404
    assert "not one payorch made" in html
    assert "payorch sends no e-mail" in html
    assert "<form" not in html.split("<main")[1]


async def test_the_form_without_its_csrf_token_is_refused_and_changes_nothing(
    app: PayorchApp, client: Client, db: Database, settings: Settings, merchant: Merchant
) -> None:
    link = await _link(db, settings, merchant.email)
    browser = app.test_client()
    await page(browser, link)
    response = await browser.post(link, form={"password": NEW_PASSWORD, "passwordAgain": NEW_PASSWORD})
    assert response.status_code == 403
    assert await _login(client, merchant.email, PASSWORD) == 200
    assert (await page(browser, link))[0].status_code == 200  # the link is still usable


@pytest.mark.parametrize(
    ("password", "again", "field"),
    [
        ("short", "short", "password"),
        ("a" * 20, "a" * 20, "password"),
        (NEW_PASSWORD, PASSWORD, "passwordAgain"),
    ],
)
async def test_a_password_signup_would_refuse_or_a_second_that_differs_is_400_naming_the_field(
    app: PayorchApp,
    client: Client,
    db: Database,
    settings: Settings,
    merchant: Merchant,
    password: str,
    again: str,
    field: str,
) -> None:
    link = await _link(db, settings, merchant.email)
    browser = app.test_client()
    response = await _reset(browser, link, password, again)
    html = await response.get_data(as_text=True)
    assert response.status_code == 400
    assert f'id="{field}-error"' in html
    assert await _login(client, merchant.email, PASSWORD) == 200
    assert (await page(browser, link))[0].status_code == 200  # the link is still usable


@pytest.fixture
async def limited_app(settings: Settings, db: Database) -> AsyncIterator[PayorchApp]:
    """An app allowing 1 login per address a minute, a refusal answered at once."""
    limits = LimitSettings(login_per_minute=1, login_refusal_hold_s=0)
    async with open_runtime(settings.model_copy(update={"limits": limits}), db) as runtime:
        yield runtime.app


async def test_the_form_is_charged_to_the_login_budget_of_its_address(
    limited_app: PayorchApp, db: Database, settings: Settings, merchant: Merchant
) -> None:
    browser = limited_app.test_client()
    login = await browser.post("/api/v1/auth/login", json={"email": merchant.email, "password": PASSWORD})
    assert login.status_code == 200
    link = await _link(db, settings, merchant.email)
    response = await _reset(browser, link)
    assert response.status_code == 429
    assert (await page(browser, link))[0].status_code == 200  # the link is still usable
