"""POST /api/v1/auth/logout: signing out ends the access token, and every other of its admin
("sign out everywhere": the admin's session version moves on, docs/api.md "Signing out")."""

from __future__ import annotations

from payorch.config import Settings
from payorch.storage.database import Database
from tests.helpers import PASSWORD, Client, Merchant, new_api_key, new_application, new_merchant

LOGOUT = "/api/v1/auth/logout"


def _bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


async def _log_in(client: Client, email: str) -> str:
    response = await client.post("/api/v1/auth/login", json={"email": email, "password": PASSWORD})
    assert response.status_code == 200, await response.get_data()
    token: str = (await response.get_json())["accessToken"]
    return token


async def test_logout_is_204_and_its_token_then_answers_401(client: Client, merchant: Merchant) -> None:
    assert (await client.get("/api/v1/applications", headers=merchant.headers)).status_code == 200
    response = await client.post(LOGOUT, headers=merchant.headers)
    assert response.status_code == 204
    assert await response.get_data() == b""
    refused = await client.get("/api/v1/applications", headers=merchant.headers)
    assert refused.status_code == 401
    assert (await refused.get_json())["message"] == "access token ended by a sign-out: log in again"
    assert (await client.post(LOGOUT, headers=merchant.headers)).status_code == 401


async def test_logout_ends_the_tokens_of_the_admins_other_logins_too(
    client: Client, merchant: Merchant
) -> None:
    other_login = await _log_in(client, merchant.email)
    assert (await client.post(LOGOUT, headers=merchant.headers)).status_code == 204
    assert (await client.get("/api/v1/applications", headers=_bearer(other_login))).status_code == 401


async def test_a_login_after_logout_gets_a_token_that_works(client: Client, merchant: Merchant) -> None:
    assert (await client.post(LOGOUT, headers=merchant.headers)).status_code == 204
    fresh = await _log_in(client, merchant.email)
    assert (await client.get("/api/v1/applications", headers=_bearer(fresh))).status_code == 200


async def test_logout_leaves_other_admins_and_api_keys_working(
    client: Client, db: Database, settings: Settings, merchant: Merchant
) -> None:
    application = await new_application(client, merchant)
    key = (await new_api_key(client, merchant, application["id"]))["key"]
    other = await new_merchant(client, db, settings)
    assert (await client.post(LOGOUT, headers=merchant.headers)).status_code == 204
    assert (await client.get("/api/v1/applications", headers=other.headers)).status_code == 200
    sessions = await client.get(
        f"/api/v1/applications/{application['id']}/sessions", headers={"X-API-Key": key}
    )
    assert sessions.status_code == 200


async def test_logout_with_an_api_key_is_401_and_ends_nothing(client: Client, merchant: Merchant) -> None:
    application = await new_application(client, merchant)
    key = (await new_api_key(client, merchant, application["id"]))["key"]
    assert (await client.post(LOGOUT, headers={"X-API-Key": key})).status_code == 401
    assert (await client.get("/api/v1/applications", headers=merchant.headers)).status_code == 200


async def test_logout_without_credentials_is_401(client: Client) -> None:
    assert (await client.post(LOGOUT)).status_code == 401
