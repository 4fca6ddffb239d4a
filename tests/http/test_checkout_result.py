"""payorch's result page, where a provider's checkout sends the customer back when the merchant gave
no redirect URLs: the session's state in words, and nothing else about it."""

from __future__ import annotations

import uuid
from typing import Any
from urllib.parse import urlsplit

import pytest

from payorch.config import Settings
from payorch.storage.database import Database
from tests.helpers import Client, Shop, create_session, eventually, expire_now, new_shop, session_body


@pytest.fixture
async def shop(client: Client, db: Database, settings: Settings) -> Shop:
    return await new_shop(client, db, settings)


async def _session(client: Client, shop: Shop) -> dict[str, Any]:
    response = await create_session(client, shop, str(uuid.uuid4()), session_body(total="1234.50"))
    assert response.status_code == 201
    created: dict[str, Any] = await response.get_json()
    return created


async def _page(client: Client, session_id: str, query: str = "") -> tuple[int, str, Any]:
    response = await client.get(f"/checkout/{session_id}/result{query}")
    return response.status_code, await response.get_data(as_text=True), response.headers


async def _status(client: Client, shop: Shop, session_id: str) -> str:
    response = await client.get(f"/api/v1/sessions/{session_id}", headers=shop.headers)
    status: str = (await response.get_json())["status"]
    return status


async def test_a_session_awaiting_confirmation_shows_its_amount_and_refreshes_itself(
    client: Client, shop: Shop
) -> None:
    created = await _session(client, shop)
    status, page, headers = await _page(client, created["sessionId"])
    assert status == 200
    assert "<h1>Confirming your payment</h1>" in page
    assert "1,234.50 PLN" in page
    assert '<meta http-equiv="refresh" content="3">' in page
    assert headers["Cache-Control"] == "no-store"
    assert headers["Content-Security-Policy"] == (
        "default-src 'none'; style-src 'unsafe-inline'; frame-ancestors 'none'"
    )
    # The order and the customer stay between the merchant and payorch.
    for private in ("order-1001", "buyer@example.com", "Kowalski", shop.application_id):
        assert private not in page


async def test_a_customer_who_left_the_checkout_is_told_nothing_was_taken(client: Client, shop: Shop) -> None:
    created = await _session(client, shop)
    status, page, _ = await _page(client, created["sessionId"], "?checkout=cancelled")
    assert status == 200
    assert "<h1>Payment cancelled</h1>" in page and "Nothing was taken" in page
    assert "refresh" not in page


async def test_a_paid_session_shows_payment_received_even_when_the_customer_had_cancelled_before(
    client: Client, shop: Shop
) -> None:
    created = await _session(client, shop)
    await client.post(urlsplit(created["checkoutUrl"]).path, form={"card_number": "4242424242424242"})

    async def paid() -> bool:
        return await _status(client, shop, created["sessionId"]) == "SUCCEEDED"

    await eventually(paid)
    for query in ("", "?checkout=cancelled"):
        status, page, _ = await _page(client, created["sessionId"], query)
        assert status == 200
        assert "<h1>Payment received</h1>" in page and "refresh" not in page


async def test_an_expired_session_says_nothing_was_taken(client: Client, shop: Shop, db: Database) -> None:
    created = await _session(client, shop)

    await expire_now(db, created["sessionId"])

    async def expired() -> bool:
        return await _status(client, shop, created["sessionId"]) == "FAILED"

    await eventually(expired)
    status, page, _ = await _page(client, created["sessionId"])
    assert (status, "<h1>Checkout expired</h1>" in page) == (200, True)


# A well-formed id no session has (fixed, so every test process collects the same test name).
@pytest.mark.parametrize("session_id", ["3f1b7c5e-9a2d-4c6e-8b1a-5d7e9f0a2c4b", "not-a-uuid", "%00"])
async def test_an_unknown_session_is_a_404_page(client: Client, session_id: str) -> None:
    status, page, _ = await _page(client, session_id)
    assert status == 404
    assert "<h1>No such payment</h1>" in page


async def test_the_result_page_cannot_be_framed_by_another_site(client: Client, shop: Shop) -> None:
    created = await _session(client, shop)
    _, _, headers = await _page(client, created["sessionId"])
    assert "frame-ancestors 'none'" in headers["Content-Security-Policy"]
    assert headers["X-Frame-Options"] == "DENY"
