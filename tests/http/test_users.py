"""A merchant's users and roles through the API: an admin invites a user with a role, the invited
user signs up with the link and logs in; roles change, users are removed, the last admin stays; a
read-only user reads and is refused every change; another merchant's users are never seen."""

from __future__ import annotations

from decimal import Decimal
from typing import Any
from urllib.parse import urlsplit

import trio

from payorch.config import Settings
from payorch.engine.accounts.password_resets import issue_password_reset
from payorch.storage.database import Database
from tests.clock import ShiftedClock
from tests.helpers import (
    PASSWORD,
    Client,
    Merchant,
    new_merchant,
    new_shop,
    post_json,
)
from tests.http.test_refunds import paid_session

USERS = "/api/v1/merchants/me/users"
INVITES = "/api/v1/merchants/me/invites"


async def invite(client: Client, admin: Merchant, email: str, role: str) -> dict[str, Any]:
    response = await client.post(INVITES, json={"email": email, "role": role}, headers=admin.headers)
    assert response.status_code == 201, await response.get_data()
    body: dict[str, Any] = await response.get_json()
    return body


def signup_path(invitation: dict[str, Any]) -> str:
    parts = urlsplit(invitation["signupUrl"])
    return f"{parts.path}?{parts.query}"


async def log_in(client: Client, email: str, password: str = PASSWORD) -> Merchant:
    response = await client.post("/api/v1/auth/login", json={"email": email, "password": password})
    assert response.status_code == 200, await response.get_data()
    return Merchant(email=email, access_token=(await response.get_json())["accessToken"])


async def second_user(client: Client, admin: Merchant, role: str, email: str | None = None) -> Merchant:
    """A user invited by `admin` with `role`, signed up with the link and logged in."""
    email = email or f"{role}.{admin.email}"
    invitation = await invite(client, admin, email, role)
    response = await client.post(
        signup_path(invitation), json={"firstName": "Grace", "lastName": "Hopper", "password": PASSWORD}
    )
    assert response.status_code == 201, await response.get_data()
    return await log_in(client, email)


async def users_of(client: Client, user: Merchant) -> list[dict[str, Any]]:
    response = await client.get(USERS, headers=user.headers)
    assert response.status_code == 200, await response.get_data()
    items: list[dict[str, Any]] = (await response.get_json())["items"]
    return items


def user_id(users: list[dict[str, Any]], email: str) -> str:
    return next(user["id"] for user in users if user["email"] == email)


async def test_an_invited_user_signs_up_with_the_link_and_logs_in_with_the_invitations_role(
    client: Client, merchant: Merchant
) -> None:
    invitation = await invite(client, merchant, "grace@merchant.example", "read_only")
    assert invitation["role"] == "read_only"
    assert invitation["signupUrl"].split("?")[0].endswith("/api/v1/users/signup")

    response = await client.post(
        signup_path(invitation), json={"firstName": "Grace", "lastName": "Hopper", "password": PASSWORD}
    )

    assert response.status_code == 201, await response.get_data()
    created = await response.get_json()
    assert (created["email"], created["role"], created["firstName"]) == (
        "grace@merchant.example",
        "read_only",
        "Grace",
    )
    grace = await log_in(client, "grace@merchant.example")
    listed = {user["email"]: user["role"] for user in await users_of(client, grace)}
    assert listed == {merchant.email: "admin", "grace@merchant.example": "read_only"}


async def test_an_invitation_link_is_used_once(client: Client, merchant: Merchant) -> None:
    invitation = await invite(client, merchant, "once@merchant.example", "admin")
    body = {"firstName": "Once", "lastName": "Only", "password": PASSWORD}
    assert (await client.post(signup_path(invitation), json=body)).status_code == 201

    again = await client.post(signup_path(invitation), json=body)

    assert again.status_code == 410
    assert (await again.get_json())["code"] == 410


async def test_an_expired_invitation_is_410(
    client: Client, merchant: Merchant, clock: ShiftedClock, settings: Settings
) -> None:
    invitation = await invite(client, merchant, "late@merchant.example", "admin")
    clock.advance(settings.signup.invite_ttl_s + 1)

    response = await client.post(
        signup_path(invitation), json={"firstName": "Late", "lastName": "Comer", "password": PASSWORD}
    )

    assert response.status_code == 410


async def test_a_newer_invitation_of_the_same_address_ends_the_older(
    client: Client, merchant: Merchant
) -> None:
    older = await invite(client, merchant, "twice@merchant.example", "admin")
    newer = await invite(client, merchant, "twice@merchant.example", "read_only")
    body = {"firstName": "Two", "lastName": "Times", "password": PASSWORD}

    assert (await client.post(signup_path(older), json=body)).status_code == 410
    pending = await (await client.get(INVITES, headers=merchant.headers)).get_json()
    assert [item["id"] for item in pending["items"]] == [newer["id"]]
    assert "signupUrl" not in pending["items"][0]


async def test_a_revoked_invitation_is_410(client: Client, merchant: Merchant) -> None:
    invitation = await invite(client, merchant, "revoked@merchant.example", "admin")
    response = await client.delete(f"{INVITES}/{invitation['id']}", headers=merchant.headers)
    assert response.status_code == 200

    joined = await client.post(
        signup_path(invitation), json={"firstName": "No", "lastName": "One", "password": PASSWORD}
    )

    assert joined.status_code == 410


async def test_inviting_a_user_of_ones_own_merchant_again_is_409(client: Client, merchant: Merchant) -> None:
    response = await client.post(
        INVITES, json={"email": merchant.email, "role": "admin"}, headers=merchant.headers
    )

    assert response.status_code == 409
    assert "already a user" in (await response.get_json())["message"]


async def test_a_signup_with_an_email_registered_elsewhere_is_409_and_spends_the_invitation(
    client: Client, db: Database, settings: Settings, merchant: Merchant
) -> None:
    other = await new_merchant(client, db, settings)
    invitation = await invite(client, merchant, other.email, "admin")
    body = {"firstName": "Else", "lastName": "Where", "password": PASSWORD}

    assert (await client.post(signup_path(invitation), json=body)).status_code == 409
    assert (await client.post(signup_path(invitation), json=body)).status_code == 410


async def test_an_unknown_role_is_400_and_makes_no_invitation(client: Client, merchant: Merchant) -> None:
    response = await client.post(
        INVITES, json={"email": "x@merchant.example", "role": "owner"}, headers=merchant.headers
    )

    assert response.status_code == 400
    assert (await (await client.get(INVITES, headers=merchant.headers)).get_json())["items"] == []


async def test_an_admin_changes_a_users_role_and_it_holds_at_their_next_request(
    client: Client, merchant: Merchant
) -> None:
    helper = await second_user(client, merchant, "admin")
    users = await users_of(client, merchant)

    response = await client.patch(
        f"{USERS}/{user_id(users, helper.email)}", json={"role": "read_only"}, headers=merchant.headers
    )

    assert response.status_code == 200
    assert (await response.get_json())["role"] == "read_only"
    refused = await client.post("/api/v1/applications", json={"name": "More"}, headers=helper.headers)
    assert refused.status_code == 403


async def test_the_last_admin_cannot_be_demoted(client: Client, merchant: Merchant) -> None:
    await second_user(client, merchant, "read_only")
    me = user_id(await users_of(client, merchant), merchant.email)

    response = await client.patch(f"{USERS}/{me}", json={"role": "read_only"}, headers=merchant.headers)

    assert response.status_code == 409
    assert "last admin" in (await response.get_json())["message"]
    assert {user["role"] for user in await users_of(client, merchant) if user["id"] == me} == {"admin"}


async def test_the_last_admin_cannot_be_removed(client: Client, merchant: Merchant) -> None:
    me = user_id(await users_of(client, merchant), merchant.email)

    response = await client.delete(f"{USERS}/{me}", headers=merchant.headers)

    assert response.status_code == 409
    assert (await client.get(USERS, headers=merchant.headers)).status_code == 200


async def test_an_admin_may_leave_while_another_admin_remains(client: Client, merchant: Merchant) -> None:
    other = await second_user(client, merchant, "admin")
    me = user_id(await users_of(client, merchant), merchant.email)

    assert (await client.delete(f"{USERS}/{me}", headers=merchant.headers)).status_code == 200

    assert (await client.get(USERS, headers=merchant.headers)).status_code == 401
    assert [user["email"] for user in await users_of(client, other)] == [other.email]


async def test_a_removed_users_access_tokens_end_at_once(client: Client, merchant: Merchant) -> None:
    helper = await second_user(client, merchant, "read_only")
    assert (await client.get(USERS, headers=helper.headers)).status_code == 200

    removed = await client.delete(
        f"{USERS}/{user_id(await users_of(client, merchant), helper.email)}", headers=merchant.headers
    )

    assert removed.status_code == 200
    assert (await client.get(USERS, headers=helper.headers)).status_code == 401
    login = await client.post("/api/v1/auth/login", json={"email": helper.email, "password": PASSWORD})
    assert login.status_code == 401


async def test_another_merchants_users_are_never_visible(
    client: Client, db: Database, settings: Settings, merchant: Merchant
) -> None:
    other = await new_merchant(client, db, settings)
    await second_user(client, other, "read_only")
    theirs = await users_of(client, other)
    await invite(client, other, "pending@other.example", "admin")

    mine = await users_of(client, merchant)
    my_invites = await (await client.get(INVITES, headers=merchant.headers)).get_json()

    assert [user["email"] for user in mine] == [merchant.email]
    assert my_invites["items"] == []
    for user in theirs:
        changed = await client.patch(
            f"{USERS}/{user['id']}", json={"role": "admin"}, headers=merchant.headers
        )
        removed = await client.delete(f"{USERS}/{user['id']}", headers=merchant.headers)
        assert (changed.status_code, removed.status_code) == (404, 404)
    assert await users_of(client, other) == theirs


async def test_a_read_only_user_is_refused_a_refund_by_the_api(
    client: Client, db: Database, settings: Settings
) -> None:
    shop = await new_shop(client, db, settings)
    session_id = await paid_session(client, shop)
    viewer = await second_user(client, shop.merchant, "read_only")

    response = await post_json(
        client,
        f"/api/v1/sessions/{session_id}/refunds",
        {"amount": Decimal("1.00"), "reason": "OTHER"},
        {**viewer.headers, "Idempotency-Key": "refund-1"},
    )

    assert response.status_code == 403
    body = await response.get_json()
    assert body["code"] == 403 and body["error"] == "Forbidden"
    assert "read_only" in body["message"]
    record = await (await client.get(f"/api/v1/sessions/{session_id}", headers=viewer.headers)).get_json()
    assert (record["status"], record["refunds"]) == ("SUCCEEDED", [])


async def test_a_read_only_user_reads_what_an_admin_reads(
    client: Client, db: Database, settings: Settings
) -> None:
    shop = await new_shop(client, db, settings)
    viewer = await second_user(client, shop.merchant, "read_only")

    for path in (
        "/api/v1/applications",
        f"/api/v1/applications/{shop.application_id}",
        f"/api/v1/applications/{shop.application_id}/api-keys",
        f"/api/v1/applications/{shop.application_id}/routing",
        f"/api/v1/applications/{shop.application_id}/webhooks",
        f"/api/v1/applications/{shop.application_id}/providers",
        USERS,
        INVITES,
    ):
        response = await client.get(path, headers=viewer.headers)
        assert response.status_code == 200, (path, await response.get_data())


async def test_a_read_only_user_may_log_out(client: Client, merchant: Merchant) -> None:
    viewer = await second_user(client, merchant, "read_only")

    assert (await client.post("/api/v1/auth/logout", headers=viewer.headers)).status_code == 204


async def test_two_admins_demoting_each_other_at_once_leave_one_admin(
    client: Client, merchant: Merchant
) -> None:
    other = await second_user(client, merchant, "admin")
    users = await users_of(client, merchant)
    answers: list[int] = []

    async def demote(by: Merchant, email: str) -> None:
        response = await client.patch(
            f"{USERS}/{user_id(users, email)}", json={"role": "read_only"}, headers=by.headers
        )
        answers.append(response.status_code)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(demote, merchant, other.email)
        nursery.start_soon(demote, other, merchant.email)

    roles = sorted(user["role"] for user in await users_of(client, merchant))
    assert roles == ["admin", "read_only"]
    assert sorted(answers) in ([200, 403], [200, 409])  # the second is refused, as read-only or as last


async def test_a_password_reset_link_is_made_for_a_read_only_user_too(
    client: Client, db: Database, settings: Settings, merchant: Merchant
) -> None:
    viewer = await second_user(client, merchant, "read_only")

    reset = await issue_password_reset(db, settings, viewer.email)

    assert "/console/reset-password?token=" in reset.reset_url
