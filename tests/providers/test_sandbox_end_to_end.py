"""The sandbox end to end through payorch's own app, as the service runs it: a session is created
through the API, paid on the sandbox's page, and the sandbox's event comes back to payorch through
`httpx.ASGITransport(app)` (the runtime runs the sender),
the route `/api/v1/provider-events/sandbox/{applicationId}` and its
signature check."""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import urlsplit

import pytest

from payorch.config import Settings
from payorch.storage.database import Database
from tests.helpers import Client, Shop, eventually, new_shop

SESSION_BODY = {
    "orderReference": "order-1001",
    "paymentMethod": "card",
    "currency": "PLN",
    "amount": {"total": 100.00},
    "customer": {"email": "buyer@example.com"},
}


@pytest.fixture
async def shop(client: Client, db: Database, settings: Settings) -> Shop:
    return await new_shop(client, db, settings)


async def _new_session(client: Client, shop: Shop) -> dict[str, Any]:
    response = await client.post(
        "/api/v1/sessions",
        data=json.dumps(SESSION_BODY),
        headers={**shop.headers, "Idempotency-Key": "key-1", "Content-Type": "application/json"},
    )
    assert response.status_code == 201, await response.get_data(as_text=True)
    body: dict[str, Any] = await response.get_json()
    return body


async def _session_status(client: Client, shop: Shop, session_id: str, wanted: str) -> dict[str, Any]:
    """The session's read record once its status is `wanted`; fails after 10 s."""

    async def with_status() -> dict[str, Any] | None:
        response = await client.get(f"/api/v1/sessions/{session_id}", headers=shop.headers)
        record: dict[str, Any] = await response.get_json()
        return record if record["status"] == wanted else None

    return await eventually(with_status)


async def test_paying_on_the_sandbox_page_completes_the_session(client: Client, shop: Shop) -> None:
    created = await _new_session(client, shop)
    page = urlsplit(created["checkoutUrl"]).path
    assert (await client.post(page, form={"card_number": "4242 4242 4242 4242"})).status_code == 200
    record = await _session_status(client, shop, created["sessionId"], "SUCCEEDED")
    assert record["failureReason"] is None


async def test_a_lost_dispute_reverses_the_session(client: Client, shop: Shop) -> None:
    created = await _new_session(client, shop)
    page = urlsplit(created["checkoutUrl"]).path
    await client.post(page, form={"card_number": "4000000000000259"})
    await _session_status(client, shop, created["sessionId"], "SUCCEEDED")
    await _session_status(client, shop, created["sessionId"], "REVERSED")
