"""Applications: create, list, read, enable and disable."""

from __future__ import annotations

from datetime import datetime

from tests.helpers import Client, Merchant, new_api_key, new_application


async def test_create_application_is_201_and_enabled(client: Client, merchant: Merchant) -> None:
    response = await client.post(
        "/api/v1/applications",
        json={"name": "Web shop", "description": {"channel": "web"}},
        headers=merchant.headers,
    )
    assert response.status_code == 201
    body = await response.get_json()
    assert body["name"] == "Web shop"
    assert body["description"] == {"channel": "web"}
    assert body["isEnabled"] is True
    assert body["createdAt"].endswith("Z")
    datetime.fromisoformat(body["createdAt"])
    assert "apiKeys" not in body


async def test_description_defaults_to_null(client: Client, merchant: Merchant) -> None:
    assert (await new_application(client, merchant))["description"] is None


async def test_empty_name_is_400(client: Client, merchant: Merchant) -> None:
    response = await client.post("/api/v1/applications", json={"name": "  "}, headers=merchant.headers)
    assert response.status_code == 400
    assert (await response.get_json())["details"][0]["field"] == "name"


async def test_name_over_100_characters_is_400(client: Client, merchant: Merchant) -> None:
    response = await client.post("/api/v1/applications", json={"name": "n" * 101}, headers=merchant.headers)
    assert response.status_code == 400


async def test_description_that_is_not_an_object_is_400(client: Client, merchant: Merchant) -> None:
    response = await client.post(
        "/api/v1/applications", json={"name": "x", "description": "text"}, headers=merchant.headers
    )
    assert response.status_code == 400


async def test_read_application(client: Client, merchant: Merchant) -> None:
    created = await new_application(client, merchant)
    response = await client.get(f"/api/v1/applications/{created['id']}", headers=merchant.headers)
    assert response.status_code == 200
    assert await response.get_json() == created


async def test_list_is_newest_first(client: Client, merchant: Merchant) -> None:
    for name in ("first", "second", "third"):
        await new_application(client, merchant, name)
    response = await client.get("/api/v1/applications", headers=merchant.headers)
    body = await response.get_json()
    assert [item["name"] for item in body["items"]] == ["third", "second", "first"]
    assert body["totalItems"] == 3
    assert all("apiKeys" not in item for item in body["items"])


async def test_list_with_include_api_keys_shows_key_summaries(client: Client, merchant: Merchant) -> None:
    application = await new_application(client, merchant)
    key = await new_api_key(client, merchant, application["id"])
    response = await client.get("/api/v1/applications?include=apiKeys", headers=merchant.headers)
    (item,) = (await response.get_json())["items"]
    assert item["apiKeys"] == [
        {
            "id": key["id"],
            "keyPrefix": key["key"][:12],
            "description": "server",
            "status": "active",
            "createdAt": key["createdAt"],
        }
    ]
    assert key["key"] not in await response.get_data(as_text=True)


async def test_unknown_include_is_400(client: Client, merchant: Merchant) -> None:
    response = await client.get("/api/v1/applications?include=secrets", headers=merchant.headers)
    assert response.status_code == 400


async def test_disable_then_enable(client: Client, merchant: Merchant) -> None:
    application = await new_application(client, merchant)
    path = f"/api/v1/applications/{application['id']}/status"
    disabled = await client.patch(path, json={"isEnabled": False}, headers=merchant.headers)
    assert disabled.status_code == 200
    body = await disabled.get_json()
    assert body["isEnabled"] is False
    assert set(body) == {"id", "name", "description", "isEnabled", "createdAt"}
    enabled = await client.patch(path, json={"isEnabled": True}, headers=merchant.headers)
    assert (await enabled.get_json())["isEnabled"] is True


async def test_status_unchanged_is_409(client: Client, merchant: Merchant) -> None:
    application = await new_application(client, merchant)
    response = await client.patch(
        f"/api/v1/applications/{application['id']}/status", json={"isEnabled": True}, headers=merchant.headers
    )
    assert response.status_code == 409
    assert (await response.get_json())["code"] == 409


async def test_disabling_keeps_the_application(client: Client, merchant: Merchant) -> None:
    application = await new_application(client, merchant)
    await client.patch(
        f"/api/v1/applications/{application['id']}/status",
        json={"isEnabled": False},
        headers=merchant.headers,
    )
    response = await client.get("/api/v1/applications", headers=merchant.headers)
    assert [item["id"] for item in (await response.get_json())["items"]] == [application["id"]]


async def test_status_needs_a_boolean(client: Client, merchant: Merchant) -> None:
    application = await new_application(client, merchant)
    path = f"/api/v1/applications/{application['id']}/status"
    for body in ({}, {"isEnabled": "false"}, {"isEnabled": 0}, {"isEnabled": None}):
        response = await client.patch(path, json=body, headers=merchant.headers)
        assert response.status_code == 400, body
        assert (await response.get_json())["details"][0]["field"] == "isEnabled"
