"""The console's Users page and the page an invitation opens: an admin invites a user with a role
and is shown the link once, changes roles, removes users (asked first), revokes invitations; the
invited user chooses a name and a password and is signed in; a read-only user sees the list only,
finds no refund form, routing editor or key form, and is refused their POSTs (403)."""

from __future__ import annotations

import re
from html import unescape
from typing import Any
from urllib.parse import urlsplit

from payorch.config import Settings
from payorch.http.services import PayorchApp
from payorch.storage.database import Database
from tests.console.helpers import csrf_of, page, session_cookie, signed_in_browser
from tests.helpers import PASSWORD, Client, Merchant, new_merchant, new_shop
from tests.http.test_refunds import paid_session
from tests.http.test_users import USERS, log_in, second_user, users_of

_LINK = re.compile(r'id="invite-link"[^>]*>([^<]+)</code>')


async def _invite(browser: Client, csrf: str, email: str, role: str) -> tuple[Any, str]:
    response = await browser.post(
        "/console/users/invite", form={"csrf_token": csrf, "email": email, "role": role}
    )
    return response, await response.get_data(as_text=True)


def _link_of(html: str) -> str:
    found = _LINK.search(html)
    assert found, html
    parts = urlsplit(unescape(found.group(1)).strip())
    return f"{parts.path}?{parts.query}"


async def _join(
    app: PayorchApp, link: str, first: str = "Grace", password: str = PASSWORD
) -> tuple[Client, Any]:
    """A new browser opening the invitation's link and sending its form."""
    browser = app.test_client()
    _, html = await page(browser, link)
    assert f'action="/console/join?{link.split("?")[1]}"' in html
    response = await browser.post(
        f"/console/join?{link.split('?')[1]}",
        form={"csrf_token": csrf_of(html), "firstName": first, "lastName": "Hopper", "password": password},
    )
    return browser, response


async def test_an_admin_invites_a_user_and_the_link_signs_them_up_and_in(
    app: PayorchApp, client: Client, merchant: Merchant
) -> None:
    admin, csrf = await signed_in_browser(app, merchant.email)

    response, html = await _invite(admin, csrf, "grace@shop.example", "read_only")

    assert response.status_code == 201
    assert "only time the link is shown" in html
    link = _link_of(html)
    assert link.startswith("/api/v1/users/signup?token=")
    opened, invitation_page = await page(app.test_client(), link)
    assert opened.status_code == 200
    said = " ".join(
        unescape(
            re.sub(r"<[^>]+>", "", invitation_page.split('id="join-invite">')[1].split("</p>")[0])
        ).split()
    )
    assert "grace@shop.example" in said and "read-only" in said and "expires" in said
    assert "organization." not in invitation_page  # none of the merchant's signup fields
    browser, joined = await _join(app, link)
    assert joined.status_code == 303, await joined.get_data(as_text=True)
    assert joined.headers["Location"] == "/console/applications"
    assert session_cookie(joined) is not None
    _, users_page = await page(browser, "/console/users")
    assert "grace@shop.example" in users_page and merchant.email in users_page
    await log_in(client, "grace@shop.example")


async def test_a_used_link_says_so_and_shows_no_form(app: PayorchApp, merchant: Merchant) -> None:
    admin, csrf = await signed_in_browser(app, merchant.email)
    _, html = await _invite(admin, csrf, "once@shop.example", "admin")
    link = _link_of(html)
    await _join(app, link)

    response, again = await page(app.test_client(), link)

    assert response.status_code == 410
    assert 'id="join-refused"' in again and '<form method="post" action="/console/join' not in again


async def test_a_weak_password_is_400_with_its_field_error_and_makes_no_user(
    app: PayorchApp, client: Client, merchant: Merchant
) -> None:
    admin, csrf = await signed_in_browser(app, merchant.email)
    _, html = await _invite(admin, csrf, "weak@shop.example", "admin")

    _, response = await _join(app, _link_of(html), password="short")

    assert response.status_code == 400
    assert 'id="password-error"' in await response.get_data(as_text=True)
    assert [user["email"] for user in await users_of(client, merchant)] == [merchant.email]


async def test_an_admin_changes_a_role_and_removes_a_user_after_confirming(
    app: PayorchApp, client: Client, merchant: Merchant
) -> None:
    helper = await second_user(client, merchant, "read_only")
    helper_id = next(user["id"] for user in await users_of(client, merchant) if user["email"] == helper.email)
    admin, csrf = await signed_in_browser(app, merchant.email)

    changed = await admin.post(f"/console/users/{helper_id}/role", form={"csrf_token": csrf, "role": "admin"})
    assert changed.status_code == 303
    assert {user["email"]: user["role"] for user in await users_of(client, merchant)}[helper.email] == "admin"

    asked = await admin.post(f"/console/users/{helper_id}/remove", form={"csrf_token": csrf})
    assert asked.status_code == 200
    assert f"Remove {helper.email}" in await asked.get_data(as_text=True)
    assert len(await users_of(client, merchant)) == 2
    removed = await admin.post(
        f"/console/users/{helper_id}/remove", form={"csrf_token": csrf, "confirm": "yes"}
    )
    assert removed.status_code == 303
    assert [user["email"] for user in await users_of(client, merchant)] == [merchant.email]
    assert (await client.get(USERS, headers=helper.headers)).status_code == 401


async def test_the_last_admin_demoted_in_the_console_is_409_with_the_reason(
    app: PayorchApp, client: Client, merchant: Merchant
) -> None:
    me = next(user["id"] for user in await users_of(client, merchant))
    admin, csrf = await signed_in_browser(app, merchant.email)

    response = await admin.post(f"/console/users/{me}/role", form={"csrf_token": csrf, "role": "read_only"})

    assert response.status_code == 409
    assert "last admin" in await response.get_data(as_text=True)


async def test_a_read_only_user_sees_the_users_but_no_form_to_change_them(
    app: PayorchApp, client: Client, merchant: Merchant
) -> None:
    viewer = await second_user(client, merchant, "read_only")
    browser, _ = await signed_in_browser(app, viewer.email)

    response, html = await page(browser, "/console/users")

    assert response.status_code == 200
    assert merchant.email in html and viewer.email in html
    for form in ("/console/users/invite", "/role", "/remove"):
        assert form not in html
    assert 'href="/console/users"' in html  # the header links the page


async def test_a_read_only_user_is_refused_a_refund_by_the_console(
    app: PayorchApp, client: Client, db: Database, settings: Settings
) -> None:
    shop = await new_shop(client, db, settings)
    session_id = await paid_session(client, shop)
    viewer = await second_user(client, shop.merchant, "read_only")
    browser, csrf = await signed_in_browser(app, viewer.email)

    _, session_page = await page(browser, f"/console/sessions/{session_id}")
    response = await browser.post(
        f"/console/sessions/{session_id}/refunds",
        form={"csrf_token": csrf, "idempotency_key": "k-1", "amount": "1.00", "confirmed": "yes"},
    )

    assert 'id="refund-read-only"' in session_page and 'name="amount"' not in session_page
    assert response.status_code == 403
    assert "read_only" in await response.get_data(as_text=True)
    record = await (await client.get(f"/api/v1/sessions/{session_id}", headers=shop.headers)).get_json()
    assert (record["status"], record["refunds"]) == ("SUCCEEDED", [])


async def test_a_read_only_user_finds_no_key_routing_webhook_or_provider_form(
    app: PayorchApp, client: Client, db: Database, settings: Settings
) -> None:
    shop = await new_shop(client, db, settings)
    viewer = await second_user(client, shop.merchant, "read_only")
    browser, _ = await signed_in_browser(app, viewer.email)
    application = f"/console/applications/{shop.application_id}"

    for path in (
        "/console/applications",
        application,
        f"{application}/routing",
        f"{application}/webhooks",
        f"{application}/providers",
    ):
        response, html = await page(browser, path)
        assert response.status_code == 200, path
        actions = re.findall(r'<form method="post" action="([^"]+)"', html)
        # Only what a read-only user may do: sign out, and try a session against the routing in force.
        assert set(actions) <= {"/console/sign-out", f"{application}/routing/evaluate#evaluate"}, (
            path,
            actions,
        )


async def test_another_merchants_users_are_not_on_the_page(
    app: PayorchApp, client: Client, db: Database, settings: Settings, merchant: Merchant
) -> None:
    other = await new_merchant(client, db, settings)
    browser, _ = await signed_in_browser(app, merchant.email)

    _, html = await page(browser, "/console/users")

    assert merchant.email in html and other.email not in html
