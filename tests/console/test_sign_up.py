"""The signup page an invite opens in a browser (the invite's `signupUrl`, GET), and its form: the
merchant and its admin made through the API's own operation, then signed in; an unusable invite says
so and shows no form; the API's POST of the same address is unchanged (tests/http/test_signup.py)."""

from __future__ import annotations

import itertools
import re
from html import unescape
from typing import Any
from urllib.parse import urlsplit

from payorch.config import Settings
from payorch.engine.accounts.invites import issue_invite
from payorch.http.services import PayorchApp
from payorch.storage.database import Database
from tests.console.helpers import csrf_of, page, session_cookie
from tests.helpers import PASSWORD, Client, signup_body

_numbers = itertools.count(1)


def _fields(email: str, password: str = PASSWORD) -> dict[str, str]:
    """The signup body's fields as the form names them (dotted paths)."""
    body = signup_body(email, f"SIGNUP-PAGE-{next(_numbers):06d}", password)

    def flat(prefix: str, value: Any) -> dict[str, str]:
        if isinstance(value, dict):
            return {k: v for key, item in value.items() for k, v in flat(f"{prefix}{key}.", item).items()}
        return {prefix.rstrip("."): str(value)}

    return flat("", body)


async def _invite(db: Database, settings: Settings, email: str) -> tuple[str, str]:
    invite = await issue_invite(db, settings, email)
    return invite.token, urlsplit(invite.signup_url).path + "?" + urlsplit(invite.signup_url).query


async def test_the_invite_link_opens_a_signup_page_naming_its_email_and_expiry(
    app: PayorchApp, db: Database, settings: Settings
) -> None:
    browser = app.test_client()
    _, link = await _invite(db, settings, "new@shop.example")
    response, html = await page(browser, link)
    assert response.status_code == 200
    assert response.content_type.startswith("text/html")
    said = " ".join(
        unescape(re.sub(r"<[^>]+>", "", html.split('id="signup-invite">')[1].split("</p>")[0])).split()
    )
    assert said.startswith("This invitation was made for new@shop.example and expires ")
    assert re.search(r"\(in 1 hours? \d+ minutes?\)|\(in 2 hours\)", said), said
    for name in ("organization.legalBusinessName", "organization.registeredAddress.city", "admin.password"):
        assert f'name="{name}"' in html
    assert 'name="admin.email" value="new@shop.example"' in html


async def test_the_form_makes_the_merchant_and_signs_its_admin_in(
    app: PayorchApp, client: Client, db: Database, settings: Settings
) -> None:
    browser = app.test_client()
    token, link = await _invite(db, settings, "owner@shop.example")
    _, html = await page(browser, link)
    form = {"csrf_token": csrf_of(html), **_fields("owner@shop.example")}
    response = await browser.post(f"/console/sign-up?token={token}", form=form)
    assert response.status_code == 303, await response.get_data(as_text=True)
    assert response.headers["Location"] == "/console/applications"
    assert session_cookie(response) is not None
    login = await client.post(
        "/api/v1/auth/login", json={"email": "owner@shop.example", "password": PASSWORD}
    )
    assert login.status_code == 200
    # The invite is spent: its link now says so, with no form.
    response, html = await page(browser, link)
    assert response.status_code == 410
    assert "used already or has expired" in html
    assert 'name="admin.password"' not in html


async def test_a_bad_field_is_400_naming_it_and_creates_nothing(
    app: PayorchApp, client: Client, db: Database, settings: Settings
) -> None:
    browser = app.test_client()
    token, link = await _invite(db, settings, "short@shop.example")
    _, html = await page(browser, link)
    fields = _fields("short@shop.example", password="short")
    fields["organization.companyWebsite"] = "not a url"
    response = await browser.post(
        f"/console/sign-up?token={token}", form={"csrf_token": csrf_of(html), **fields}
    )
    html = await response.get_data(as_text=True)
    assert response.status_code == 400
    assert 'id="admin-password-error"' in html
    assert 'id="organization-companyWebsite-error"' in html
    assert 'value="Acme Widgets Ltd"' in html  # what was typed is kept, but the password
    assert "short" not in re.findall(r'name="admin.password"[^>]*', html)[0]
    login = await client.post("/api/v1/auth/login", json={"email": "short@shop.example", "password": "short"})
    assert login.status_code == 401
    assert (await page(browser, link))[0].status_code == 200  # the invite is still usable


async def test_an_unknown_invite_shows_no_form(app: PayorchApp) -> None:
    response, html = await page(app.test_client(), "/api/v1/merchants/signup?token=no-such-token")
    assert response.status_code == 404
    assert "not one payorch made" in html
    assert "<form" not in html.split("<main")[1]


async def test_the_form_without_its_csrf_token_is_refused_and_creates_nothing(
    app: PayorchApp, client: Client, db: Database, settings: Settings
) -> None:
    browser = app.test_client()
    token, link = await _invite(db, settings, "csrf@shop.example")
    await page(browser, link)
    response = await browser.post(f"/console/sign-up?token={token}", form=_fields("csrf@shop.example"))
    assert response.status_code == 403
    assert (await page(browser, link))[0].status_code == 200
