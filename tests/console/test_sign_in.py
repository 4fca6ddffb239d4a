"""Signing in to the console and out of it: the API's login checks, the session cookie, its end."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit

import pytest

from payorch.config import LimitSettings, Settings
from payorch.engine.accounts.access_tokens import AccessClaims, issue_access_token
from payorch.http.services import PayorchApp
from payorch.runtime import open_runtime
from payorch.storage.database import Database
from tests.clock import ShiftedClock
from tests.console.helpers import csrf_of, page, session_cookie, sign_in, signed_in
from tests.helpers import PASSWORD, Client, Merchant


def sign_in_then(location: str) -> str | None:
    """The page the sign-in page at `location` opens after signing in (None: not a sign-in page)."""
    parts = urlsplit(location)
    if parts.path != "/console/sign-in":
        return None
    return parse_qs(parts.query).get("next", [""])[0]


async def test_sign_in_sets_the_session_cookie_and_opens_the_applications(
    app: PayorchApp, merchant: Merchant, settings: Settings
) -> None:
    client = app.test_client()
    response = await sign_in(client, merchant.email)
    assert response.status_code == 303
    assert response.headers["Location"] == "/console/applications"
    cookie = session_cookie(response)
    assert cookie is not None
    attributes = [part.strip() for part in cookie.split(";")]
    assert "Secure" in attributes
    assert "HttpOnly" in attributes
    assert "SameSite=Strict" in attributes
    assert "Path=/console" in attributes
    assert f"Max-Age={settings.auth.jwt_ttl_s}" in attributes
    response, html = await page(client, "/console/applications")
    assert response.status_code == 200
    assert "Sign out" in html


async def test_the_email_is_compared_without_regard_to_case(app: PayorchApp, merchant: Merchant) -> None:
    response = await sign_in(app.test_client(), merchant.email.upper())
    assert response.status_code == 303


async def test_a_wrong_password_shows_the_form_again_with_the_apis_message(
    app: PayorchApp, merchant: Merchant
) -> None:
    client = app.test_client()
    response = await sign_in(client, merchant.email, PASSWORD + "x")
    assert response.status_code == 401
    html = await response.get_data(as_text=True)
    assert "e-mail or password is incorrect" in html
    assert merchant.email in html  # kept in the form, the password is not
    assert PASSWORD not in html
    assert session_cookie(response) is None
    assert (await client.get("/console/applications")).status_code == 303


async def test_an_empty_password_is_400_with_the_message_next_to_the_field(
    app: PayorchApp, merchant: Merchant
) -> None:
    response = await sign_in(app.test_client(), merchant.email, "")
    assert response.status_code == 400
    html = await response.get_data(as_text=True)
    assert 'id="password-error"' in html
    assert session_cookie(response) is None


async def test_sign_in_without_its_csrf_token_is_403(app: PayorchApp, merchant: Merchant) -> None:
    client = app.test_client()
    await page(client, "/console/sign-in")
    response = await client.post("/console/sign-in", form={"email": merchant.email, "password": PASSWORD})
    assert response.status_code == 403
    assert session_cookie(response) is None
    wrong = await client.post(
        "/console/sign-in", form={"csrf_token": "x" * 43, "email": merchant.email, "password": PASSWORD}
    )
    assert wrong.status_code == 403
    assert session_cookie(wrong) is None


LOGINS = 2


@pytest.fixture
async def limited_app(settings: Settings, db: Database) -> AsyncIterator[PayorchApp]:
    """An app allowing 2 logins per address a minute and 3 failed logins per account an hour."""
    limits = LimitSettings(
        login_per_minute=LOGINS, failed_logins_per_account_per_hour=3, login_refusal_hold_s=0
    )  # refused at once, not held
    async with open_runtime(settings.model_copy(update={"limits": limits}), db) as runtime:
        yield runtime.app


async def test_sign_in_shares_the_login_bucket_of_the_address_with_the_api(
    limited_app: PayorchApp, merchant: Merchant
) -> None:
    client = limited_app.test_client()
    api = await client.post("/api/v1/auth/login", json={"email": merchant.email, "password": PASSWORD + "x"})
    assert api.status_code == 401
    assert (await sign_in(client, merchant.email, PASSWORD + "x")).status_code == 401
    refused = await sign_in(client, merchant.email)  # the right password, past the limit
    assert refused.status_code == 429
    assert int(refused.headers["Retry-After"]) >= 1
    assert session_cookie(refused) is None
    assert "too many login and signup attempts" in await refused.get_data(as_text=True)


@pytest.fixture
async def account_limited_app(settings: Settings, db: Database) -> AsyncIterator[PayorchApp]:
    """An app allowing 3 failed logins per account an hour and many logins per address."""
    limits = LimitSettings(login_per_minute=100, failed_logins_per_account_per_hour=3)
    async with open_runtime(settings.model_copy(update={"limits": limits}), db) as runtime:
        yield runtime.app


async def test_failed_console_sign_ins_count_against_the_account_for_the_api_too(
    account_limited_app: PayorchApp, merchant: Merchant
) -> None:
    def api_login(address: str) -> Any:
        return account_limited_app.test_client().post(
            "/api/v1/auth/login",
            json={"email": merchant.email, "password": PASSWORD},
            scope_base={"client": (address, 40000)},
        )

    # The account's 3 failed logins spent from three addresses, then the 3 more one address gets
    # while they are spent: that address's API login is refused, another address's is not.
    for address in ("192.0.2.1", "192.0.2.2", "192.0.2.3", "192.0.2.1", "192.0.2.1", "192.0.2.1"):
        client, scope = account_limited_app.test_client(), {"client": (address, 40000)}
        response = await sign_in(client, merchant.email, PASSWORD + "x", scope_base=scope)
        assert response.status_code == 401
    assert (await api_login("192.0.2.1")).status_code == 429
    assert (await api_login("198.51.100.7")).status_code == 200


@pytest.mark.parametrize(
    "path",
    ["/console", "/console/applications", "/console/applications/00000000-0000-4000-8000-000000000000"],
)
async def test_a_page_without_the_session_cookie_redirects_to_sign_in(app: PayorchApp, path: str) -> None:
    response = await app.test_client().get(path)
    assert response.status_code == 303
    # /console itself opens the applications, which then ask to sign in.
    assert sign_in_then(response.headers["Location"]) == path or path == "/console"


async def test_signing_in_opens_the_page_that_asked_for_it(app: PayorchApp, merchant: Merchant) -> None:
    client = app.test_client()
    wanted = "/console/applications?page=2"
    response = await client.get(wanted)
    assert sign_in_then(response.headers["Location"]) == wanted
    _, html = await page(client, response.headers["Location"])
    assert '<input type="hidden" name="next" value="/console/applications?page=2">' in html
    response = await client.post(
        "/console/sign-in",
        form={"csrf_token": csrf_of(html), "email": merchant.email, "password": PASSWORD, "next": wanted},
    )
    assert response.status_code == 303
    assert response.headers["Location"] == wanted


@pytest.mark.parametrize(
    "elsewhere",
    [
        "https://attacker.example/console/",
        "//attacker.example/console/applications",
        "/\\attacker.example/console/",
        "/console\\@attacker.example",
        "/api/v1/applications",
        "javascript:alert(1)",
        "/console/applications\r\nSet-Cookie: planted=1",
        "/console/applications\n",
        "/console/applications\r",
        "/console/applications\tx",
        "/console/applications\x00",
        "/console/applications x",
        "/console/applications\x7f",
    ],
)
async def test_signing_in_never_sends_the_browser_off_the_console(
    app: PayorchApp, merchant: Merchant, elsewhere: str
) -> None:
    client = app.test_client()
    _, html = await page(client, f"/console/sign-in?{urlencode({'next': elsewhere})}")
    assert 'name="next"' not in html
    response = await client.post(
        "/console/sign-in",
        form={"csrf_token": csrf_of(html), "email": merchant.email, "password": PASSWORD, "next": elsewhere},
    )
    assert response.status_code == 303
    assert response.headers["Location"] == "/console/applications"


async def test_a_post_without_the_session_cookie_redirects_to_sign_in_and_changes_nothing(
    app: PayorchApp, client: Client, merchant: Merchant
) -> None:
    response = await app.test_client().post("/console/applications", form={"name": "Sneaky"})
    assert response.status_code == 303
    assert response.headers["Location"] == "/console/sign-in"
    listed = await client.get("/api/v1/applications", headers=merchant.headers)
    assert (await listed.get_json())["totalItems"] == 0


async def test_an_expired_session_signs_out(
    app: PayorchApp, merchant: Merchant, settings: Settings, clock: ShiftedClock
) -> None:
    client = app.test_client()
    await signed_in(client, merchant.email)
    claims = AccessClaims(user_id=uuid.uuid4(), merchant_id=uuid.uuid4())
    expired = issue_access_token(
        claims,
        secret=settings.auth.jwt_secret,
        ttl_s=settings.auth.jwt_ttl_s,
        now=clock.now() - timedelta(seconds=settings.auth.jwt_ttl_s + 1),
    )
    client.set_cookie("localhost", "payorch_console", expired, path="/console")
    response = await client.get("/console/applications")
    assert response.status_code == 303
    assert sign_in_then(response.headers["Location"]) == "/console/applications"
    cleared = session_cookie(response)
    assert cleared is not None and "Max-Age=0" in cleared


async def test_a_forged_session_signs_out(app: PayorchApp) -> None:
    client = app.test_client()
    client.set_cookie("localhost", "payorch_console", "not-a-token", path="/console")
    response = await client.get("/console/applications")
    assert response.status_code == 303
    assert sign_in_then(response.headers["Location"]) == "/console/applications"


async def test_sign_out_ends_the_session(app: PayorchApp, merchant: Merchant) -> None:
    client = app.test_client()
    csrf = await signed_in(client, merchant.email)
    response = await client.post("/console/sign-out", form={"csrf_token": csrf})
    assert response.status_code == 303
    assert response.headers["Location"] == "/console/sign-in"
    cleared = session_cookie(response)
    assert cleared is not None and "Max-Age=0" in cleared
    assert (await client.get("/console/applications")).status_code == 303


def _session_token(response: Any) -> str:
    cookie = session_cookie(response)
    assert cookie is not None
    return cookie.split(";")[0].partition("=")[2]


async def test_after_sign_out_the_old_cookie_and_its_token_as_bearer_are_refused(
    app: PayorchApp, merchant: Merchant
) -> None:
    client = app.test_client()
    token = _session_token(await sign_in(client, merchant.email))
    _, html = await page(client, "/console/applications")
    await client.post("/console/sign-out", form={"csrf_token": csrf_of(html)})
    # A copy of the cookie kept from before (the browser deleted its own).
    copy = app.test_client()
    copy.set_cookie("localhost", "payorch_console", token, path="/console")
    response = await copy.get("/console/applications")
    assert response.status_code == 303
    assert sign_in_then(response.headers["Location"]) == "/console/applications"
    bearer = await copy.get("/api/v1/applications", headers={"Authorization": f"Bearer {token}"})
    assert bearer.status_code == 401


async def test_sign_out_without_the_csrf_token_is_403_and_keeps_the_session(
    app: PayorchApp, merchant: Merchant
) -> None:
    client = app.test_client()
    await signed_in(client, merchant.email)
    response = await client.post("/console/sign-out", form={})
    assert response.status_code == 403
    assert session_cookie(response) is None
    assert (await client.get("/console/applications")).status_code == 200


async def test_each_sign_in_has_its_own_csrf_token(app: PayorchApp, merchant: Merchant) -> None:
    first = await signed_in(app.test_client(), merchant.email)
    second = await signed_in(app.test_client(), merchant.email)
    assert first != second
    _, html = await page(app.test_client(), "/console/sign-in")
    assert csrf_of(html) not in (first, second)
