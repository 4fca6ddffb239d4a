"""API answers carry secrets (a new API key, a login's JWT, a webhook's signing secret) and customers'
data (sessions): every one of them, errors included, tells browsers and proxies never to store it."""

from __future__ import annotations

import pytest

from payorch.config import Settings
from payorch.storage.database import Database
from tests.helpers import PASSWORD, Client, Shop, create_session, new_shop


@pytest.fixture
async def shop(client: Client, db: Database, settings: Settings) -> Shop:
    return await new_shop(client, db, settings)


async def test_api_answers_with_a_secret_or_a_customers_data_are_no_store(client: Client, shop: Shop) -> None:
    created = await create_session(client, shop, "cache-1")
    session_id = (await created.get_json())["sessionId"]
    answers = [
        await client.post("/api/v1/auth/login", json={"email": shop.merchant.email, "password": PASSWORD}),
        await client.post(
            f"/api/v1/applications/{shop.application_id}/api-keys", json={}, headers=shop.merchant.headers
        ),
        created,
        await client.get(f"/api/v1/sessions/{session_id}", headers=shop.headers),
        await client.get(f"/api/v1/applications/{shop.application_id}/sessions", headers=shop.headers),
    ]
    assert [a.status_code for a in answers] == [200, 201, 201, 200, 200]
    assert [a.headers.get("Cache-Control") for a in answers] == ["no-store"] * len(answers)


async def test_api_errors_are_no_store_too(client: Client, shop: Shop) -> None:
    answers = [
        await client.get("/api/v1/sessions/00000000-0000-0000-0000-000000000000", headers=shop.headers),
        await client.get("/api/v1/applications"),
        await client.post("/api/v1/auth/login", json={"email": "nobody@example.com"}),
    ]
    assert [a.status_code for a in answers] == [404, 401, 400]
    assert [a.headers.get("Cache-Control") for a in answers] == ["no-store"] * len(answers)
