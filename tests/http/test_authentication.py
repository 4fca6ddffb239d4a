"""Credentials: JWTs for management, API keys for one application, and ownership checks."""

from __future__ import annotations

import base64
import json
import time
import uuid

import jwt
import pytest

from payorch.config import Settings
from payorch.storage.database import Connection, Database
from tests.helpers import Client, Merchant, new_api_key, new_application, new_merchant


def _b64(data: dict[str, object]) -> str:
    return base64.urlsafe_b64encode(json.dumps(data).encode()).rstrip(b"=").decode()


def _claims(
    merchant_id: str = "00000000-0000-0000-0000-000000000000", **overrides: object
) -> dict[str, object]:
    now = int(time.time())
    claims: dict[str, object] = {
        "sub": str(uuid.uuid4()),
        "mid": merchant_id,
        "iat": now,
        "exp": now + 600,
        "jti": uuid.uuid4().hex,
    }
    claims.update(overrides)
    return claims


async def _applications_with(client: Client, token: str) -> int:
    response = await client.get("/api/v1/applications", headers={"Authorization": f"Bearer {token}"})
    return response.status_code


async def test_no_credentials_is_401(client: Client) -> None:
    response = await client.get("/api/v1/applications")
    assert response.status_code == 401
    assert (await response.get_json())["code"] == 401


async def test_authorization_without_bearer_scheme_is_401(client: Client, merchant: Merchant) -> None:
    response = await client.get("/api/v1/applications", headers={"Authorization": merchant.access_token})
    assert response.status_code == 401


async def test_forged_jwt_signed_with_another_secret_is_401(client: Client, merchant: Merchant) -> None:
    genuine = jwt.decode(merchant.access_token, options={"verify_signature": False})
    forged = jwt.encode(genuine, "another-secret-that-is-long-enough-0123456789", algorithm="HS256")
    assert await _applications_with(client, forged) == 401


async def test_jwt_with_alg_none_is_401(client: Client, merchant: Merchant) -> None:
    genuine = jwt.decode(merchant.access_token, options={"verify_signature": False})
    unsigned = f"{_b64({'alg': 'none', 'typ': 'JWT'})}.{_b64(genuine)}."
    assert await _applications_with(client, unsigned) == 401


@pytest.mark.filterwarnings("ignore:The HMAC key")
async def test_jwt_signed_with_hs512_is_401(client: Client, merchant: Merchant, settings: Settings) -> None:
    genuine = jwt.decode(merchant.access_token, options={"verify_signature": False})
    other_algorithm = jwt.encode(genuine, settings.auth.jwt_secret, algorithm="HS512")
    assert await _applications_with(client, other_algorithm) == 401


async def test_expired_jwt_is_401(client: Client, merchant: Merchant, settings: Settings) -> None:
    genuine = jwt.decode(merchant.access_token, options={"verify_signature": False})
    expired = jwt.encode(
        _claims(genuine["mid"], iat=int(time.time()) - 7200, exp=int(time.time()) - 1),
        settings.auth.jwt_secret,
        algorithm="HS256",
    )
    response = await client.get("/api/v1/applications", headers={"Authorization": f"Bearer {expired}"})
    assert response.status_code == 401
    assert "expired" in (await response.get_json())["message"]


async def test_jwt_missing_merchant_claim_is_401(client: Client, settings: Settings) -> None:
    claims = _claims()
    del claims["mid"]
    token = jwt.encode(claims, settings.auth.jwt_secret, algorithm="HS256")
    assert await _applications_with(client, token) == 401


async def test_garbage_jwt_is_401(client: Client) -> None:
    assert await _applications_with(client, "not.a.jwt") == 401


async def test_api_key_on_management_call_is_401(client: Client, merchant: Merchant) -> None:
    application = await new_application(client, merchant)
    key = await new_api_key(client, merchant, application["id"])
    for method, path in [
        ("GET", "/api/v1/applications"),
        ("GET", f"/api/v1/applications/{application['id']}"),
        ("GET", f"/api/v1/applications/{application['id']}/api-keys"),
        ("POST", f"/api/v1/applications/{application['id']}/api-keys"),
        ("PATCH", f"/api/v1/applications/{application['id']}/status"),
    ]:
        response = await client.open(path, method=method, json={}, headers={"X-API-Key": key["key"]})
        assert response.status_code == 401, (method, path)


async def test_api_key_reads_its_own_application_sessions(client: Client, merchant: Merchant) -> None:
    application = await new_application(client, merchant)
    key = await new_api_key(client, merchant, application["id"])
    response = await client.get(
        f"/api/v1/applications/{application['id']}/sessions", headers={"X-API-Key": key["key"]}
    )
    assert response.status_code == 200


async def test_unknown_api_key_is_401(client: Client) -> None:
    response = await client.get(
        f"/api/v1/applications/{uuid.uuid4()}/sessions", headers={"X-API-Key": "sk_" + "a" * 40}
    )
    assert response.status_code == 401


async def test_malformed_api_key_is_401(client: Client) -> None:
    response = await client.get(
        f"/api/v1/applications/{uuid.uuid4()}/sessions", headers={"X-API-Key": "nope"}
    )
    assert response.status_code == 401


async def test_revoked_key_is_401_on_its_next_request_and_other_keys_keep_working(
    client: Client, merchant: Merchant
) -> None:
    application = await new_application(client, merchant)
    revoked = await new_api_key(client, merchant, application["id"])
    kept = await new_api_key(client, merchant, application["id"])
    sessions = f"/api/v1/applications/{application['id']}/sessions"
    assert (await client.get(sessions, headers={"X-API-Key": revoked["key"]})).status_code == 200

    response = await client.delete(
        f"/api/v1/applications/{application['id']}/api-keys/{revoked['id']}", headers=merchant.headers
    )
    assert response.status_code == 200
    assert await response.get_json() == {}

    assert (await client.get(sessions, headers={"X-API-Key": revoked["key"]})).status_code == 401
    assert (await client.get(sessions, headers={"X-API-Key": kept["key"]})).status_code == 200


async def test_api_key_of_disabled_application_is_403(client: Client, merchant: Merchant) -> None:
    application = await new_application(client, merchant)
    key = await new_api_key(client, merchant, application["id"])
    await client.patch(
        f"/api/v1/applications/{application['id']}/status",
        json={"isEnabled": False},
        headers=merchant.headers,
    )
    response = await client.get(
        f"/api/v1/applications/{application['id']}/sessions", headers={"X-API-Key": key["key"]}
    )
    assert response.status_code == 403


async def test_api_key_of_one_application_cannot_read_another(client: Client, merchant: Merchant) -> None:
    first = await new_application(client, merchant, "first")
    second = await new_application(client, merchant, "second")
    key = await new_api_key(client, merchant, first["id"])
    response = await client.get(
        f"/api/v1/applications/{second['id']}/sessions", headers={"X-API-Key": key["key"]}
    )
    assert response.status_code == 403


async def test_another_merchants_application_is_403_on_every_route(
    client: Client, merchant: Merchant, db: Database, settings: Settings
) -> None:
    application = await new_application(client, merchant)
    key = await new_api_key(client, merchant, application["id"])
    stranger = await new_merchant(client, db, settings)
    base = f"/api/v1/applications/{application['id']}"
    for method, path, body in [
        ("GET", base, None),
        ("PATCH", f"{base}/status", {"isEnabled": False}),
        ("POST", f"{base}/api-keys", {}),
        ("GET", f"{base}/api-keys", None),
        ("DELETE", f"{base}/api-keys/{key['id']}", None),
        ("GET", f"{base}/sessions", None),
    ]:
        response = await client.open(path, method=method, json=body, headers=stranger.headers)
        assert response.status_code == 403, (method, path)
        assert "id" not in await response.get_json()

    async def key_is_active(conn: Connection) -> bool:
        return bool(await conn.fetchval("SELECT revoked_at IS NULL FROM api_keys"))

    assert await db.autocommit(key_is_active)
    response = await client.get(base, headers=merchant.headers)
    assert (await response.get_json())["isEnabled"] is True


async def test_stranger_api_key_cannot_read_another_merchants_application(
    client: Client, merchant: Merchant, db: Database, settings: Settings
) -> None:
    application = await new_application(client, merchant)
    stranger = await new_merchant(client, db, settings)
    stranger_application = await new_application(client, stranger)
    stranger_key = await new_api_key(client, stranger, stranger_application["id"])
    response = await client.get(
        f"/api/v1/applications/{application['id']}/sessions", headers={"X-API-Key": stranger_key["key"]}
    )
    assert response.status_code == 403


async def test_application_that_does_not_exist_is_404(client: Client, merchant: Merchant) -> None:
    response = await client.get(f"/api/v1/applications/{uuid.uuid4()}", headers=merchant.headers)
    assert response.status_code == 404


async def test_application_id_that_is_not_a_uuid_is_404(client: Client, merchant: Merchant) -> None:
    response = await client.get("/api/v1/applications/not-a-uuid", headers=merchant.headers)
    assert response.status_code == 404


async def test_list_shows_only_own_applications(
    client: Client, merchant: Merchant, db: Database, settings: Settings
) -> None:
    await new_application(client, merchant, "mine")
    stranger = await new_merchant(client, db, settings)
    await new_application(client, stranger, "theirs")
    response = await client.get("/api/v1/applications", headers=merchant.headers)
    assert [item["name"] for item in (await response.get_json())["items"]] == ["mine"]


async def test_unauthenticated_request_with_invalid_body_is_401_not_400(client: Client) -> None:
    response = await client.post("/api/v1/applications", json={"name": 5})
    assert response.status_code == 401
