"""API keys: created once in full, stored as SHA-256, listed as summaries, revoked."""

from __future__ import annotations

import hashlib
import re
import uuid

from payorch.storage.database import Connection, Database
from tests.helpers import Client, Merchant, new_api_key, new_application


async def test_created_key_has_the_documented_format(client: Client, merchant: Merchant) -> None:
    application = await new_application(client, merchant)
    response = await client.post(
        f"/api/v1/applications/{application['id']}/api-keys",
        json={"description": "checkout server"},
        headers=merchant.headers,
    )
    assert response.status_code == 201
    body = await response.get_json()
    assert re.fullmatch(r"sk_[0-9A-Za-z]{40}", body["key"])
    assert body["keyPrefix"] == body["key"][:12]
    assert body["status"] == "active"
    assert body["description"] == "checkout server"
    assert set(body) == {"id", "key", "keyPrefix", "description", "status", "createdAt"}


async def test_description_is_optional(client: Client, merchant: Merchant) -> None:
    application = await new_application(client, merchant)
    response = await client.post(
        f"/api/v1/applications/{application['id']}/api-keys", json={}, headers=merchant.headers
    )
    assert response.status_code == 201
    assert (await response.get_json())["description"] == ""


async def test_only_a_sha256_of_the_key_is_stored(client: Client, merchant: Merchant, db: Database) -> None:
    application = await new_application(client, merchant)
    key = await new_api_key(client, merchant, application["id"])

    async def stored_row(conn: Connection) -> list[object]:
        return list((await conn.fetchrow("SELECT * FROM api_keys")).values())

    row = await db.autocommit(stored_row)
    assert hashlib.sha256(key["key"].encode()).digest() in row
    assert not any(isinstance(value, str) and key["key"] in value for value in row)


async def test_listing_shows_summaries_never_the_key(client: Client, merchant: Merchant) -> None:
    application = await new_application(client, merchant)
    first = await new_api_key(client, merchant, application["id"])
    second = await new_api_key(client, merchant, application["id"])
    response = await client.get(
        f"/api/v1/applications/{application['id']}/api-keys", headers=merchant.headers
    )
    assert response.status_code == 200
    body = await response.get_json()
    assert [item["id"] for item in body["items"]] == [second["id"], first["id"]]
    assert all("key" not in item for item in body["items"])
    text = await response.get_data(as_text=True)
    assert first["key"] not in text and second["key"] not in text


async def test_revoked_key_is_listed_as_revoked(client: Client, merchant: Merchant) -> None:
    application = await new_application(client, merchant)
    key = await new_api_key(client, merchant, application["id"])
    await client.delete(
        f"/api/v1/applications/{application['id']}/api-keys/{key['id']}", headers=merchant.headers
    )
    response = await client.get(
        f"/api/v1/applications/{application['id']}/api-keys", headers=merchant.headers
    )
    assert [item["status"] for item in (await response.get_json())["items"]] == ["revoked"]


async def test_revoking_twice_is_accepted(client: Client, merchant: Merchant) -> None:
    application = await new_application(client, merchant)
    key = await new_api_key(client, merchant, application["id"])
    path = f"/api/v1/applications/{application['id']}/api-keys/{key['id']}"
    assert (await client.delete(path, headers=merchant.headers)).status_code == 200
    assert (await client.delete(path, headers=merchant.headers)).status_code == 200


async def test_revoking_an_unknown_key_is_404(client: Client, merchant: Merchant) -> None:
    application = await new_application(client, merchant)
    response = await client.delete(
        f"/api/v1/applications/{application['id']}/api-keys/{uuid.uuid4()}", headers=merchant.headers
    )
    assert response.status_code == 404


async def test_revoking_a_key_through_another_application_is_404(client: Client, merchant: Merchant) -> None:
    first = await new_application(client, merchant, "first")
    second = await new_application(client, merchant, "second")
    key = await new_api_key(client, merchant, first["id"])
    response = await client.delete(
        f"/api/v1/applications/{second['id']}/api-keys/{key['id']}", headers=merchant.headers
    )
    assert response.status_code == 404


async def test_key_id_that_is_not_a_uuid_is_404(client: Client, merchant: Merchant) -> None:
    application = await new_application(client, merchant)
    response = await client.delete(
        f"/api/v1/applications/{application['id']}/api-keys/not-a-uuid", headers=merchant.headers
    )
    assert response.status_code == 404


async def test_key_can_be_created_without_a_body(client: Client, merchant: Merchant) -> None:
    application = await new_application(client, merchant)
    response = await client.post(
        f"/api/v1/applications/{application['id']}/api-keys", headers=merchant.headers
    )
    assert response.status_code == 201
    assert (await response.get_json())["description"] == ""
