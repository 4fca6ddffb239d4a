"""PayU refunds and expiry through payorch's own app, against the fake PayU: refunds full and partial
with payorch's refund id as `extRefundId`, completed or failed by PayU's refund notifications; a
refund PayU refuses; expiry cancelling the order, and a payment PayU reports after it."""

from __future__ import annotations

from decimal import Decimal

import httpx

from payorch.storage.database import Database
from tests import fake_payu as payu_fake
from tests.fake_payu import ORDERS, FakePayu
from tests.helpers import Client, Shop, expire_now
from tests.providers import payu_support
from tests.providers.api_support import created, events, record, refund, settled
from tests.providers.payu_support import (
    order_of,
    payu_caller,
)

fake_payu = payu_fake.fake_payu
__all__ = ["payu_caller"]


settings = payu_support.settings_with_payu
shop = payu_support.payu_shop


async def _paid(client: Client, shop: Shop, fake: FakePayu, caller: httpx.AsyncClient) -> tuple[str, str]:
    """A BLIK session paid on PayU, its notifications delivered: (session id, PayU order id)."""
    session = await created(client, shop, method="blik")
    order_id: str = order_of(fake, session["sessionId"])["orderId"]
    fake.pay(order_id)
    await fake.deliver(caller)
    assert (await record(client, shop, session["sessionId"]))["status"] == "SUCCEEDED"
    return session["sessionId"], order_id


# --- Refunds ---------------------------------------------------------------------------------------


async def test_a_full_refund_is_a_payu_refund_with_payorchs_id_completed_by_payus_notification(
    client: Client, shop: Shop, fake_payu: FakePayu, payu_caller: httpx.AsyncClient, db: Database
) -> None:
    session_id, order_id = await _paid(client, shop, fake_payu, payu_caller)
    response = await refund(client, shop, session_id, "r1")
    assert response.status_code == 201, await response.get_data(as_text=True)
    refund_id = (await response.get_json())["refundId"]
    sent = fake_payu.only("POST", f"{ORDERS}/{order_id}/refunds")
    assert sent.json == {
        "refund": {
            "description": f"Refund {refund_id}",
            "amount": "10000",
            "currencyCode": "PLN",
            "extRefundId": refund_id,
        }
    }
    fake_payu.finish_refund(order_id, sent.answer["refund"]["refundId"])
    answers = await fake_payu.deliver(payu_caller, repeat=2)
    assert [a.json()["applied"] for a in answers] == [True, False]
    stored = await record(client, shop, session_id)
    assert stored["status"] == "REFUNDED"
    assert [(r["id"], r["status"]) for r in stored["refunds"]] == [(refund_id, "COMPLETED")]
    assert [e["type"] for e in await events(db, session_id)] == ["session.completed", "refund.completed"]


async def test_a_partial_refund_payu_cancels_fails_and_the_amount_is_refundable_again(
    client: Client, shop: Shop, fake_payu: FakePayu, payu_caller: httpx.AsyncClient, db: Database
) -> None:
    session_id, order_id = await _paid(client, shop, fake_payu, payu_caller)
    response = await refund(client, shop, session_id, "r1", amount=Decimal("40.00"))
    assert response.status_code == 201
    sent = fake_payu.only("POST", f"{ORDERS}/{order_id}/refunds")
    assert sent.json is not None and sent.json["refund"]["amount"] == "4000"
    assert (await record(client, shop, session_id))["status"] == "PARTIALLY_REFUNDED"
    fake_payu.finish_refund(order_id, sent.answer["refund"]["refundId"], "CANCELED")
    (answer,) = await fake_payu.deliver(payu_caller)
    assert answer.json() == {"received": True, "applied": True}
    stored = await record(client, shop, session_id)
    assert (stored["refunds"][0]["status"], stored["refunds"][0]["failureReason"]) == (
        "FAILED",
        "PAYMENT_FAILED",
    )
    assert stored["status"] == "SUCCEEDED"
    assert (await events(db, session_id))[-1]["type"] == "refund.failed"
    whole = await refund(client, shop, session_id, "r2")
    assert whole.status_code == 201
    assert (await whole.get_json())["amount"] == Decimal("100.00")


async def test_two_partial_refunds_complete_each_by_its_own_notification(
    client: Client, shop: Shop, fake_payu: FakePayu, payu_caller: httpx.AsyncClient
) -> None:
    session_id, order_id = await _paid(client, shop, fake_payu, payu_caller)
    for key, amount in (("r1", "30.00"), ("r2", "70.00")):
        assert (await refund(client, shop, session_id, key, amount=Decimal(amount))).status_code == 201
    for sent in fake_payu.requests_to("POST", f"{ORDERS}/{order_id}/refunds"):
        fake_payu.finish_refund(order_id, sent.answer["refund"]["refundId"])
    await fake_payu.deliver(payu_caller, reverse=True)
    stored = await record(client, shop, session_id)
    assert stored["status"] == "REFUNDED"
    assert {r["status"] for r in stored["refunds"]} == {"COMPLETED"}


async def test_a_refund_payu_refuses_fails_with_provider_refused(
    client: Client, shop: Shop, fake_payu: FakePayu, payu_caller: httpx.AsyncClient
) -> None:
    session_id, order_id = await _paid(client, shop, fake_payu, payu_caller)
    fake_payu.order(order_id)["totalAmount"] = "5000"  # PayU has less left than payorch asks
    await refund(client, shop, session_id, "r1")
    refused = fake_payu.only("POST", f"{ORDERS}/{order_id}/refunds")
    assert (refused.status, refused.answer["status"]["codeLiteral"]) == (400, "NO_BALANCE")
    stored = await record(client, shop, session_id)
    assert (stored["refunds"][0]["status"], stored["refunds"][0]["failureReason"]) == (
        "FAILED",
        "PROVIDER_REFUSED",
    )
    assert stored["status"] == "SUCCEEDED"


async def test_a_refund_notification_of_a_refund_payorch_never_made_changes_nothing(
    client: Client, shop: Shop, fake_payu: FakePayu, payu_caller: httpx.AsyncClient, db: Database
) -> None:
    session_id, order_id = await _paid(client, shop, fake_payu, payu_caller)
    fake_payu.order(order_id)["_refunds"].append(
        {
            "refundId": "5999",
            "extRefundId": "made-in-payus-panel",
            "amount": "100",
            "currencyCode": "PLN",
            "description": "panel",
            "status": "PENDING",
        }
    )
    fake_payu.finish_refund(order_id, "5999")
    (answer,) = await fake_payu.deliver(payu_caller)
    assert answer.json() == {"received": True, "applied": False}
    assert (await record(client, shop, session_id))["status"] == "SUCCEEDED"


# --- Expiry ----------------------------------------------------------------------------------------


async def test_payorch_expiring_a_session_cancels_its_payu_order(
    client: Client, shop: Shop, fake_payu: FakePayu, payu_caller: httpx.AsyncClient, db: Database
) -> None:
    session = await created(client, shop, method="blik")
    order_id = order_of(fake_payu, session["sessionId"])["orderId"]
    await expire_now(db, session["sessionId"])
    stored = await settled(client, shop, session["sessionId"])
    assert (stored["status"], stored["failureReason"]) == ("FAILED", "EXPIRED")
    assert fake_payu.only("DELETE", f"{ORDERS}/{order_id}").status == 200
    assert fake_payu.order(order_id)["status"] == "CANCELED"
    # PayU's notification of the cancellation follows, and changes nothing more.
    (answer,) = await fake_payu.deliver(payu_caller)
    assert answer.json()["received"] is True
    assert [e["type"] for e in await events(db, session["sessionId"])] == ["session.expired"]


async def test_an_order_paid_just_before_expiry_succeeds_the_session_instead(
    client: Client, shop: Shop, fake_payu: FakePayu, db: Database
) -> None:
    session = await created(client, shop, method="blik")
    order_id = order_of(fake_payu, session["sessionId"])["orderId"]
    fake_payu.pay(order_id)  # its notification is still on the way when payorch's expiry comes
    await expire_now(db, session["sessionId"])
    stored = await settled(client, shop, session["sessionId"])
    assert (stored["status"], stored["failureReason"]) == ("SUCCEEDED", None)
    assert fake_payu.only("DELETE", f"{ORDERS}/{order_id}").status == 400
    assert fake_payu.requests_to("GET", f"{ORDERS}/{order_id}")[-1].status == 200


async def test_a_payment_payu_reports_after_the_cancel_is_a_late_payment_that_succeeds_the_session(
    client: Client, shop: Shop, fake_payu: FakePayu, payu_caller: httpx.AsyncClient, db: Database
) -> None:
    session = await created(client, shop, method="blik")
    order_id = order_of(fake_payu, session["sessionId"])["orderId"]
    await expire_now(db, session["sessionId"])
    await settled(client, shop, session["sessionId"])
    fake_payu.owed.clear()
    # The customer's BLIK payment was already under way: PayU completes it after all.
    fake_payu.move_order(order_id, "COMPLETED")
    (answer,) = await fake_payu.deliver(payu_caller)
    assert answer.json() == {"received": True, "applied": True}
    assert (await record(client, shop, session["sessionId"]))["status"] == "SUCCEEDED"
    assert [e["type"] for e in await events(db, session["sessionId"])] == [
        "session.expired",
        "session.completed",
    ]
