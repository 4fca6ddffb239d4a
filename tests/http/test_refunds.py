"""Refunds: exact balances, provider outcomes, and idempotency under concurrency."""

from __future__ import annotations

import uuid
from datetime import timedelta
from decimal import Decimal
from typing import Any
from urllib.parse import urlsplit

import pytest
import trio

from payorch.config import Settings
from payorch.jsonexact import loads_exact
from payorch.providers.base import ProviderError
from payorch.providers.sandbox import SandboxProvider
from payorch.storage import outbox
from payorch.storage.database import Connection, Database
from payorch.supervisors.key_sweeper import delete_expired_keys
from payorch.values.clock import SYSTEM_CLOCK
from tests.helpers import Client, Shop, create_session, eventually, new_shop, post_json, session_body


@pytest.fixture
async def shop(client: Client, db: Database, settings: Settings) -> Shop:
    return await new_shop(client, db, settings)


async def record_of(client: Client, shop: Shop, session_id: str) -> dict[str, Any]:
    """The read record, amounts parsed exactly (as Decimal)."""
    response = await client.get(f"/api/v1/sessions/{session_id}", headers=shop.headers)
    body: dict[str, Any] = loads_exact(await response.get_data())
    return body


async def record_when(client: Client, shop: Shop, session_id: str, check: Any) -> dict[str, Any]:
    """The session record once `check(record)` holds; fails after 10 s."""

    async def matching() -> dict[str, Any] | None:
        record = await record_of(client, shop, session_id)
        return record if check(record) else None

    return await eventually(matching)


async def paid_session(
    client: Client, shop: Shop, total: str = "100.00", card: str = "4242424242424242"
) -> str:
    response = await create_session(client, shop, f"pay-{uuid.uuid4()}", session_body(total=total))
    created = await response.get_json()
    await client.post(urlsplit(created["checkoutUrl"]).path, form={"card_number": card})
    await record_when(client, shop, created["sessionId"], lambda record: record["status"] == "SUCCEEDED")
    return str(created["sessionId"])


async def refund(client: Client, shop: Shop, session_id: str, key: str, **body: Any) -> Any:
    return await post_json(
        client, f"/api/v1/sessions/{session_id}/refunds", body, {**shop.headers, "Idempotency-Key": key}
    )


async def test_full_refund_when_amount_is_omitted(client: Client, shop: Shop, db: Database) -> None:
    session_id = await paid_session(client, shop)
    response = await refund(client, shop, session_id, "r1", reason="REQUESTED_BY_CUSTOMER")
    assert response.status_code == 201
    body = await response.get_json()
    assert body["sessionId"] == session_id
    assert body["status"] == "PENDING"
    assert body["amount"] == Decimal("100.00")
    assert body["currency"] == "PLN"
    assert body["reason"] == "REQUESTED_BY_CUSTOMER"
    uuid.UUID(body["refundId"])
    assert (await record_of(client, shop, session_id))["status"] == "REFUNDED"
    record = await record_when(
        client, shop, session_id, lambda record: record["refunds"][0]["status"] == "COMPLETED"
    )
    assert record["refunds"][0]["id"] == body["refundId"]
    types = [event["type"] for event in await db.autocommit(outbox.events_of_session, uuid.UUID(session_id))]
    assert types == ["session.completed", "refund.completed"]


async def test_partial_refund_leaves_partially_refunded(client: Client, shop: Shop) -> None:
    session_id = await paid_session(client, shop)
    response = await refund(client, shop, session_id, "r1", amount=Decimal("30.00"))
    assert response.status_code == 201
    assert (await record_of(client, shop, session_id))["status"] == "PARTIALLY_REFUNDED"
    rest = await refund(client, shop, session_id, "r2")
    assert (await rest.get_json())["amount"] == Decimal("70.00")
    assert (await record_of(client, shop, session_id))["status"] == "REFUNDED"


async def test_ten_and_twenty_cents_of_thirty_cents_leave_exactly_refunded(
    client: Client, shop: Shop
) -> None:
    session_id = await paid_session(client, shop, total="0.30")
    assert (await refund(client, shop, session_id, "a", amount=Decimal("0.10"))).status_code == 201
    assert (await refund(client, shop, session_id, "b", amount=Decimal("0.20"))).status_code == 201
    record = await record_of(client, shop, session_id)
    assert record["status"] == "REFUNDED"
    assert sum(item["amount"] for item in record["refunds"]) == Decimal("0.30")


async def test_refund_beyond_the_balance_is_422_in_shape_b(client: Client, shop: Shop) -> None:
    session_id = await paid_session(client, shop)
    await refund(client, shop, session_id, "a", amount=Decimal("60.00"))
    response = await refund(client, shop, session_id, "b", amount=Decimal("40.01"))
    assert response.status_code == 422
    body = await response.get_json()
    assert (body["statusCode"], body["code"]) == (422, "REFUND_EXCEEDS_BALANCE")
    assert (await record_of(client, shop, session_id))["status"] == "PARTIALLY_REFUNDED"


async def test_refund_of_a_pending_session_is_422_not_refundable(client: Client, shop: Shop) -> None:
    created = await (await create_session(client, shop, "k")).get_json()
    response = await refund(client, shop, created["sessionId"], "r")
    assert response.status_code == 422
    assert (await response.get_json())["code"] == "SESSION_NOT_REFUNDABLE"


async def test_refund_of_a_fully_refunded_session_is_422_not_refundable(client: Client, shop: Shop) -> None:
    session_id = await paid_session(client, shop)
    await refund(client, shop, session_id, "a")
    response = await refund(client, shop, session_id, "b", amount=Decimal("0.01"))
    assert (await response.get_json())["code"] == "SESSION_NOT_REFUNDABLE"


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"amount": Decimal("0")}, "amount"),
        ({"amount": Decimal("0.009")}, "amount"),
        ({"amount": Decimal("0.011")}, "amount"),
        ({"amount": "10.00"}, "amount"),
        ({"reason": "BECAUSE"}, "reason"),
        ({"lineItems": [{"name": "Mug", "quantity": 0, "unitPrice": Decimal("1")}]}, "lineItems.0.quantity"),
        (  # more decimals than the session's currency (PLN) has, as the session's own items
            {"lineItems": [{"name": "Mug", "quantity": 1, "unitPrice": Decimal("1.005")}]},
            "lineItems.0.unitPrice",
        ),
    ],
)
async def test_invalid_refund_is_400_and_changes_nothing(
    client: Client, shop: Shop, body: dict[str, Any], field: str
) -> None:
    session_id = await paid_session(client, shop)
    response = await refund(client, shop, session_id, "r", **body)
    assert response.status_code == 400
    assert any(item["field"].startswith(field) for item in (await response.get_json())["details"])
    record = await record_of(client, shop, session_id)
    assert (record["status"], record["refunds"]) == ("SUCCEEDED", [])


async def test_missing_idempotency_key_is_400(client: Client, shop: Shop) -> None:
    session_id = await paid_session(client, shop)
    response = await post_json(client, f"/api/v1/sessions/{session_id}/refunds", {}, shop.headers)
    assert response.status_code == 400


async def test_line_items_are_stored_as_given(client: Client, shop: Shop, db: Database) -> None:
    session_id = await paid_session(client, shop)
    items = [{"name": "Mug", "sku": "MUG-1", "quantity": 3, "unitPrice": Decimal("999.99")}]
    await refund(client, shop, session_id, "r", amount=Decimal("1.00"), lineItems=items)

    async def stored(conn: Connection) -> Any:
        return await conn.fetchval("SELECT line_items FROM refunds")

    assert await db.autocommit(stored) == items


async def test_another_merchants_session_is_404(
    client: Client, shop: Shop, db: Database, settings: Settings
) -> None:
    session_id = await paid_session(client, shop)
    stranger = await new_shop(client, db, settings)
    assert (await refund(client, stranger, session_id, "r")).status_code == 404
    assert (await record_of(client, shop, session_id))["status"] == "SUCCEEDED"


async def test_24_concurrent_refunds_of_10_on_100_accept_exactly_10(client: Client, shop: Shop) -> None:
    session_id = await paid_session(client, shop)
    statuses: list[int] = []
    codes: list[str] = []

    async def one(number: int) -> None:
        response = await refund(client, shop, session_id, f"r{number}", amount=Decimal("10.00"))
        statuses.append(response.status_code)
        if response.status_code == 422:
            codes.append((await response.get_json())["code"])

    async with trio.open_nursery() as senders:
        for number in range(24):
            senders.start_soon(one, number)
    assert sorted(statuses) == [201] * 10 + [422] * 14
    # Once the balance is gone the session is REFUNDED, so late ones may hear "not refundable".
    assert set(codes) <= {"REFUND_EXCEEDS_BALANCE", "SESSION_NOT_REFUNDABLE"}
    record = await record_of(client, shop, session_id)
    assert record["status"] == "REFUNDED"
    assert sum(item["amount"] for item in record["refunds"]) == Decimal("100.00")


async def test_a_refund_the_rules_refuse_leaves_its_key_free_for_a_corrected_retry(
    client: Client, shop: Shop, db: Database
) -> None:
    session_id = await paid_session(client, shop)
    refused = await refund(client, shop, session_id, "fix-me", amount=Decimal("100.01"))
    assert (await refused.get_json())["code"] == "REFUND_EXCEEDS_BALANCE"

    async def keys(conn: Connection) -> int:
        return int(await conn.fetchval("SELECT count(*) FROM idempotency_keys WHERE key = 'fix-me'"))

    assert await db.autocommit(keys) == 0  # the claim went with the refused refund
    retried = await refund(client, shop, session_id, "fix-me", amount=Decimal("100.00"))
    assert retried.status_code == 201, await retried.get_data(as_text=True)


async def test_same_key_sent_12_times_at_once_makes_one_refund(client: Client, shop: Shop) -> None:
    session_id = await paid_session(client, shop)
    answers: list[Any] = []

    async def one() -> None:
        answers.append(await refund(client, shop, session_id, "same", amount=Decimal("10.00")))

    async with trio.open_nursery() as senders:
        for _ in range(12):
            senders.start_soon(one)
    refund_ids = set()
    for answer in answers:
        assert answer.status_code in (201, 409)
        body = await answer.get_json()
        if answer.status_code == 201:
            refund_ids.add(body["refundId"])
        else:
            assert body["code"] == "IDEMPOTENCY_KEY_IN_PROGRESS"
            assert answer.headers["Retry-After"] == str(body["retryAfter"])
    assert len(refund_ids) == 1
    assert len((await record_of(client, shop, session_id))["refunds"]) == 1


async def test_replay_returns_the_first_answer_and_another_body_is_a_mismatch(
    client: Client, shop: Shop
) -> None:
    session_id = await paid_session(client, shop)
    first = await refund(client, shop, session_id, "r", amount=Decimal("10.00"))
    again = await refund(client, shop, session_id, "r", amount=Decimal("10.0"))
    assert again.status_code == first.status_code == 201
    assert (await again.get_json())["refundId"] == (await first.get_json())["refundId"]
    assert again.headers.get("Idempotent-Replayed") == "true"
    other = await refund(client, shop, session_id, "r", amount=Decimal("11.00"))
    assert other.status_code == 422
    assert (await other.get_json())["code"] == "IDEMPOTENCY_KEY_MISMATCH"


async def test_same_key_on_another_session_is_another_refund(client: Client, shop: Shop) -> None:
    first_session = await paid_session(client, shop)
    second_session = await paid_session(client, shop)
    assert (await refund(client, shop, first_session, "r")).status_code == 201
    assert (await refund(client, shop, second_session, "r")).status_code == 201


async def test_refund_rejected_by_the_provider_restores_the_balance(
    client: Client, shop: Shop, db: Database
) -> None:
    session_id = await paid_session(client, shop, card="4000000000005126")
    assert (await refund(client, shop, session_id, "r")).status_code == 201
    assert (await record_of(client, shop, session_id))["status"] == "REFUNDED"
    record = await record_when(
        client, shop, session_id, lambda record: record["refunds"][0]["status"] == "FAILED"
    )
    assert record["refunds"][0]["failureReason"] == "LOST_OR_STOLEN_CARD"
    assert record["status"] == "SUCCEEDED"
    events = await db.autocommit(outbox.events_of_session, uuid.UUID(session_id))
    assert events[-1]["type"] == "refund.failed"
    assert events[-1]["data"]["failureReason"] == "LOST_OR_STOLEN_CARD"
    assert events[-1]["data"]["sessionId"] == session_id
    # The amount is back in the balance: it can be refunded again.
    assert (await refund(client, shop, session_id, "r2", amount=Decimal("100.00"))).status_code == 201


async def test_unreachable_provider_answers_202_and_the_supervisor_submits_later(
    client: Client, shop: Shop, db: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    session_id = await paid_session(client, shop)
    reachable = trio.Event()
    submit = SandboxProvider.submit_refund

    async def unreachable_until_set(self: SandboxProvider, *args: Any, **kwargs: Any) -> Any:
        if not reachable.is_set():
            raise ProviderError("connection refused")
        return await submit(self, *args, **kwargs)

    monkeypatch.setattr(SandboxProvider, "submit_refund", unreachable_until_set)
    response = await refund(client, shop, session_id, "r")
    assert response.status_code == 202
    assert (await response.get_json())["status"] == "PENDING"
    assert (await record_of(client, shop, session_id))["status"] == "REFUNDED"
    reachable.set()
    record = await record_when(
        client, shop, session_id, lambda record: record["refunds"][0]["status"] == "COMPLETED"
    )
    assert record["status"] == "REFUNDED"


async def test_expired_idempotency_keys_are_deleted(
    client: Client, shop: Shop, db: Database, app: Any
) -> None:
    await create_session(client, shop, "old")

    async def age(conn: Connection) -> None:
        await conn.execute(
            "UPDATE idempotency_keys SET expires_at = $1", SYSTEM_CLOCK.now() - timedelta(seconds=1)
        )

    await db.transaction(age)
    assert await delete_expired_keys(app.services.context) == 1
    # The key is free again: the same key makes a new session.
    again = await create_session(client, shop, "old", session_body(total="1.00"))
    assert again.status_code == 201
    assert again.headers.get("Idempotent-Replayed") is None


async def test_refund_without_any_body_refunds_the_whole_balance(client: Client, shop: Shop) -> None:
    session_id = await paid_session(client, shop)
    response = await client.post(
        f"/api/v1/sessions/{session_id}/refunds", headers={**shop.headers, "Idempotency-Key": "empty"}
    )
    assert response.status_code == 201
    assert loads_exact(await response.get_data())["amount"] == Decimal("100.00")
