"""Mollie end to end through payorch's own app, against a fake Mollie on loopback (tests/fake_mollie.py):
linking an account, a session's Mollie payment as Mollie documents it, Mollie's id-only webhook read
back from Mollie with the stored key, refunds through Mollie's Refunds API, expiry and chargebacks."""

from __future__ import annotations

from collections.abc import AsyncIterator
from decimal import Decimal
from typing import Any

import httpx
import pytest

from payorch.config import Settings
from payorch.runtime import Runtime
from payorch.storage.database import Database
from tests import fake_mollie as mollie_fake
from tests.fake_mollie import FakeMollie
from tests.helpers import Client, Shop, expire_now, new_application, new_merchant
from tests.providers.api_support import created, events, events_seen, record, refund, settled
from tests.providers.mollie_support import (
    MOLLIE_KEY,
    PUBLIC_BASE_URL,
    link,
    mollie_settings,
    new_linked_shop,
    payment_of,
)

fake_mollie = mollie_fake.fake_mollie


@pytest.fixture
def settings(settings: Settings, fake_mollie: FakeMollie) -> Settings:
    fake_mollie.accept_key(MOLLIE_KEY)
    return mollie_settings(settings, fake_mollie)


@pytest.fixture
async def mollie_caller(runtime: Runtime) -> AsyncIterator[httpx.AsyncClient]:
    """How the fake Mollie reaches payorch's provider-events route: HTTP into the app itself."""
    transport = httpx.ASGITransport(app=runtime.app)  # type: ignore[arg-type]  # ASGI typing differs
    async with httpx.AsyncClient(transport=transport) as client:
        yield client


@pytest.fixture
async def shop(client: Client, db: Database, settings: Settings) -> Shop:
    """A merchant's application linked to Mollie only."""
    return await new_linked_shop(client, db, settings, ("mollie", MOLLIE_KEY))


async def _paid(
    client: Client, shop: Shop, fake: FakeMollie, caller: httpx.AsyncClient, **change: Any
) -> tuple[str, str]:
    """A session paid on Mollie, its webhook called: (session id, Mollie payment id)."""
    session = await created(client, shop, **change)
    payment_id = payment_of(fake, session["sessionId"])
    fake.pay(payment_id)
    answer = await fake.call_webhook(payment_id, via=caller)
    assert answer.json() == {"received": True, "applied": True}
    return session["sessionId"], payment_id


# --- Linking ---------------------------------------------------------------------------------------


async def test_linking_checks_the_key_with_one_authenticated_read_and_registers_nothing_at_mollie(
    client: Client, shop: Shop, fake_mollie: FakeMollie
) -> None:
    (check,) = fake_mollie.requests
    assert (check.method, check.path, check.query) == ("GET", "/v2/payments", {"limit": "1"})
    assert check.headers["authorization"] == f"Bearer {MOLLIE_KEY}"
    assert check.status == 200
    listed = await client.get(
        f"/api/v1/applications/{shop.application_id}/providers", headers=shop.merchant.headers
    )
    (config,) = (await listed.get_json())["items"]
    assert (config["provider"], config["isActive"]) == ("mollie", True)
    assert sorted(config["paymentMethods"]) == ["apple_pay", "blik", "card"]


async def test_linking_with_a_key_mollie_refuses_is_422_with_mollies_reason_and_stores_nothing(
    client: Client, db: Database, settings: Settings, fake_mollie: FakeMollie
) -> None:
    merchant = await new_merchant(client, db, settings)
    application = await new_application(client, merchant)
    response = await link(client, merchant, application["id"], api_key="test_revokedKey0000000000000000")
    assert response.status_code == 422
    message = (await response.get_json())["message"]
    assert "mollie rejected the API key" in message
    assert "Missing authentication, or failed to authenticate" in message  # Mollie's own detail
    assert "test_revoked" not in message
    assert fake_mollie.only("GET", "/v2/payments").status == 401
    listed = await client.get(f"/api/v1/applications/{application['id']}/providers", headers=merchant.headers)
    assert (await listed.get_json())["items"] == []


async def test_a_key_that_is_not_a_mollie_api_key_is_422_without_asking_mollie(
    client: Client, db: Database, settings: Settings, fake_mollie: FakeMollie
) -> None:
    merchant = await new_merchant(client, db, settings)
    application = await new_application(client, merchant)
    response = await link(client, merchant, application["id"], api_key="sk_test_not_mollie_123")
    assert response.status_code == 422
    message = (await response.get_json())["message"]
    assert "live_ or test_" in message and "sk_test_not_mollie_123" not in message
    assert fake_mollie.requests == []


async def test_linking_while_mollie_is_down_is_502_and_stores_nothing(
    client: Client, db: Database, settings: Settings, fake_mollie: FakeMollie
) -> None:
    merchant = await new_merchant(client, db, settings)
    application = await new_application(client, merchant)
    fake_mollie.fail_next("GET", "/v2/payments", 503)
    response = await link(client, merchant, application["id"])
    assert response.status_code == 502
    assert "mollie could not be reached" in (await response.get_json())["message"]
    listed = await client.get(f"/api/v1/applications/{application['id']}/providers", headers=merchant.headers)
    assert (await listed.get_json())["items"] == []


# --- Creating a session -------------------------------------------------------------------------------


async def test_a_card_session_is_a_mollie_creditcard_payment_returning_through_payorch(
    client: Client, shop: Shop, fake_mollie: FakeMollie
) -> None:
    session = await created(client, shop, total="123.45", currency="EUR", method="card", locale="nl_NL")
    sent = fake_mollie.only("POST", "/v2/payments")
    assert sent.status == 201
    assert sent.headers["authorization"] == f"Bearer {MOLLIE_KEY}"
    assert sent.headers["idempotency-key"] == f"payorch-session-{session['sessionId']}"
    way_back = f"{PUBLIC_BASE_URL}/checkout/{session['sessionId']}/return?attempt=1"
    assert sent.json == {
        "amount": {"currency": "EUR", "value": "123.45"},
        "description": "Order order-1001",
        "method": "creditcard",
        "redirectUrl": way_back,
        "cancelUrl": way_back,
        "webhookUrl": f"{PUBLIC_BASE_URL}/api/v1/provider-events/mollie/{shop.application_id}",
        "metadata": {
            "payorch_session_id": session["sessionId"],
            "payorch_application_id": shop.application_id,
        },
        "locale": "nl_NL",
    }
    assert session["checkoutUrl"] == sent.answer["_links"]["checkout"]["href"]
    assert session["routing"]["selectedProvider"] == "mollie"
    stored = await record(client, shop, session["sessionId"])
    assert (stored["providerName"], stored["status"]) == ("mollie", "PENDING")


async def test_a_blik_session_is_a_mollie_blik_payment_in_pln_returning_through_payorch(
    client: Client, shop: Shop, fake_mollie: FakeMollie
) -> None:
    session = await created(
        client,
        shop,
        total="20.00",
        currency="PLN",
        method="blik",
        redirectUrls={"success": "https://shop.example/ok", "failure": "https://shop.example/ko"},
    )
    sent = fake_mollie.only("POST", "/v2/payments")
    assert sent.json is not None
    assert (sent.json["method"], sent.json["amount"]) == ("blik", {"currency": "PLN", "value": "20.00"})
    way_back = f"{PUBLIC_BASE_URL}/checkout/{session['sessionId']}/return?attempt=1"
    assert (sent.json["redirectUrl"], sent.json["cancelUrl"]) == (way_back, way_back)
    assert "locale" not in sent.json


async def test_apple_pay_is_applepay_and_yen_are_written_without_decimals(
    client: Client, shop: Shop, fake_mollie: FakeMollie
) -> None:
    await created(client, shop, "jpy", total="5000", currency="JPY", method="apple_pay")
    sent = fake_mollie.only("POST", "/v2/payments")
    assert sent.json is not None
    assert (sent.json["method"], sent.json["amount"]) == ("applepay", {"currency": "JPY", "value": "5000"})


async def test_blik_in_another_currency_than_pln_is_not_routed_to_mollie(
    client: Client, shop: Shop, fake_mollie: FakeMollie
) -> None:
    response = await client.post(
        "/api/v1/sessions",
        json={
            "orderReference": "order-1",
            "paymentMethod": "blik",
            "currency": "EUR",
            "amount": {"total": 10, "shipping": 0, "tax": 0},
            "customer": {"email": "buyer@example.com", "firstName": "Jan", "lastName": "Kowalski"},
        },
        headers={**shop.headers, "Idempotency-Key": "eur-blik"},
    )
    assert response.status_code == 422
    assert (await response.get_json())["code"] == "NO_PROVIDER_AVAILABLE"
    assert fake_mollie.requests_to("POST", "/v2/payments") == []


# --- Mollie's webhook -------------------------------------------------------------------------------


async def test_a_paid_webhook_called_three_times_succeeds_the_session_once(
    client: Client, shop: Shop, fake_mollie: FakeMollie, mollie_caller: httpx.AsyncClient, db: Database
) -> None:
    session = await created(client, shop)
    payment_id = payment_of(fake_mollie, session["sessionId"])
    fake_mollie.pay(payment_id)
    answers = [(await fake_mollie.call_webhook(payment_id, via=mollie_caller)).json() for _ in range(3)]
    assert [a["applied"] for a in answers] == [True, False, False]
    assert (await record(client, shop, session["sessionId"]))["status"] == "SUCCEEDED"
    assert [e["type"] for e in await events(db, session["sessionId"])] == ["session.completed"]
    # Each call was checked by reading the payment with the merchant's key.
    reads = fake_mollie.requests_to("GET", f"/v2/payments/{payment_id}")
    assert len(reads) == 3 and {r.api_key for r in reads} == {MOLLIE_KEY}


async def test_a_webhook_for_a_payment_still_open_changes_nothing(
    client: Client, shop: Shop, fake_mollie: FakeMollie, mollie_caller: httpx.AsyncClient, db: Database
) -> None:
    session = await created(client, shop)
    payment_id = payment_of(fake_mollie, session["sessionId"])
    answer = await fake_mollie.call_webhook(payment_id, via=mollie_caller)
    assert answer.json() == {"received": True, "applied": False}
    assert (await record(client, shop, session["sessionId"]))["status"] == "PENDING"
    assert await events_seen(db) == 0


async def test_a_forged_webhook_naming_a_payment_mollie_does_not_know_changes_nothing(
    client: Client, shop: Shop, fake_mollie: FakeMollie, mollie_caller: httpx.AsyncClient, db: Database
) -> None:
    session = await created(client, shop)
    payment_id = payment_of(fake_mollie, session["sessionId"])
    url = fake_mollie.payment(payment_id)["webhookUrl"]
    forged = await fake_mollie.call_webhook("tr_forged0000", via=mollie_caller, url=url)
    assert forged.json() == {"received": True, "applied": False}
    assert fake_mollie.only("GET", "/v2/payments/tr_forged0000").status == 404
    not_a_form = await mollie_caller.post(url, content=b'{"id": "tr_x", "status": "paid"}')
    assert not_a_form.status_code == 400
    assert (await record(client, shop, session["sessionId"]))["status"] == "PENDING"
    assert await events(db, session["sessionId"]) == []
    assert await events_seen(db) == 0


async def test_a_webhook_mollie_cannot_be_asked_about_is_502_and_applies_when_mollie_calls_again(
    client: Client, shop: Shop, fake_mollie: FakeMollie, mollie_caller: httpx.AsyncClient
) -> None:
    session = await created(client, shop)
    payment_id = payment_of(fake_mollie, session["sessionId"])
    fake_mollie.pay(payment_id)
    fake_mollie.fail_next("GET", f"/v2/payments/{payment_id}", 500)
    failed = await fake_mollie.call_webhook(payment_id, via=mollie_caller)
    assert failed.status_code == 502
    assert failed.json()["message"] == "could not look the event up with Mollie"
    assert (await record(client, shop, session["sessionId"]))["status"] == "PENDING"
    again = await fake_mollie.call_webhook(payment_id, via=mollie_caller)
    assert again.json() == {"received": True, "applied": True}
    assert (await record(client, shop, session["sessionId"]))["status"] == "SUCCEEDED"


async def test_a_failed_mollie_payment_leaves_the_session_pending_until_it_expires(
    client: Client, shop: Shop, fake_mollie: FakeMollie, mollie_caller: httpx.AsyncClient, db: Database
) -> None:
    session = await created(client, shop)
    payment_id = payment_of(fake_mollie, session["sessionId"])
    fake_mollie.fail(payment_id)
    answer = await fake_mollie.call_webhook(payment_id, via=mollie_caller)
    assert answer.status_code == 200
    assert (await record(client, shop, session["sessionId"]))["status"] == "PENDING"
    assert await events(db, session["sessionId"]) == []


async def test_a_chargeback_reverses_the_session_once(
    client: Client, shop: Shop, fake_mollie: FakeMollie, mollie_caller: httpx.AsyncClient, db: Database
) -> None:
    session_id, payment_id = await _paid(client, shop, fake_mollie, mollie_caller)
    fake_mollie.chargeback(payment_id)
    first = await fake_mollie.call_webhook(payment_id, via=mollie_caller)
    again = await fake_mollie.call_webhook(payment_id, via=mollie_caller)
    assert (first.json()["applied"], again.json()["applied"]) == (True, False)
    reversed_ = await record(client, shop, session_id)
    assert reversed_["status"] == "REVERSED" and reversed_["disputeLostAt"] is not None
    assert fake_mollie.requests_to("GET", f"/v2/payments/{payment_id}/chargebacks")[-1].status == 200
    sent = await events(db, session_id)
    assert [e["type"] for e in sent] == ["session.completed", "session.dispute_lost"]
    assert sent[-1]["data"]["status"] == "REVERSED"
    assert sent[-1]["data"]["disputeLostAt"] == reversed_["disputeLostAt"]


async def test_a_chargeback_of_a_refunded_session_keeps_it_refunded_and_tells_the_merchant(
    client: Client, shop: Shop, fake_mollie: FakeMollie, mollie_caller: httpx.AsyncClient, db: Database
) -> None:
    session_id, payment_id = await _paid(client, shop, fake_mollie, mollie_caller)
    response = await refund(client, shop, session_id, "r1")
    assert response.status_code == 201, await response.get_data(as_text=True)
    fake_mollie.settle_refund(fake_mollie.only("POST", f"/v2/payments/{payment_id}/refunds").answer["id"])
    assert (await fake_mollie.call_webhook(payment_id, via=mollie_caller)).json()["applied"]
    assert (await record(client, shop, session_id))["disputeLostAt"] is None
    fake_mollie.chargeback(payment_id)
    assert (await fake_mollie.call_webhook(payment_id, via=mollie_caller)).json()["applied"]
    stored = await record(client, shop, session_id)
    assert stored["status"] == "REFUNDED"  # the money went out twice: the refund and the chargeback
    assert stored["disputeLostAt"] is not None
    sent = await events(db, session_id)
    assert [e["type"] for e in sent] == ["session.completed", "refund.completed", "session.dispute_lost"]
    assert sent[-1]["data"]["status"] == "REFUNDED"


async def test_a_reversed_chargeback_changes_nothing(
    client: Client, shop: Shop, fake_mollie: FakeMollie, mollie_caller: httpx.AsyncClient
) -> None:
    session_id, payment_id = await _paid(client, shop, fake_mollie, mollie_caller)
    fake_mollie.chargeback(payment_id, reversed_=True)
    answer = await fake_mollie.call_webhook(payment_id, via=mollie_caller)
    assert answer.json() == {"received": True, "applied": False}
    assert (await record(client, shop, session_id))["status"] == "SUCCEEDED"


# --- Refunds -------------------------------------------------------------------------------------------


async def test_a_partial_refund_through_mollies_refunds_api_completes_once_mollie_refunds_it(
    client: Client, shop: Shop, fake_mollie: FakeMollie, mollie_caller: httpx.AsyncClient, db: Database
) -> None:
    session_id, payment_id = await _paid(client, shop, fake_mollie, mollie_caller)
    response = await refund(client, shop, session_id, "r1", amount=Decimal("30.00"))
    assert response.status_code == 201, await response.get_data(as_text=True)
    refund_id = (await response.get_json())["refundId"]
    sent = fake_mollie.only("POST", f"/v2/payments/{payment_id}/refunds")
    assert sent.headers["idempotency-key"] == f"payorch-refund-{refund_id}"
    assert sent.json == {
        "amount": {"currency": "PLN", "value": "30.00"},
        "metadata": {"payorch_refund_id": refund_id, "payorch_session_id": session_id},
    }
    assert (await record(client, shop, session_id))["status"] == "PARTIALLY_REFUNDED"
    fake_mollie.settle_refund(sent.answer["id"])
    answers = [
        (await fake_mollie.call_webhook(payment_id, via=mollie_caller)).json()["applied"] for _ in range(2)
    ]
    assert answers == [True, False]
    stored = await record(client, shop, session_id)
    assert stored["status"] == "PARTIALLY_REFUNDED"
    assert [(r["id"], r["status"]) for r in stored["refunds"]] == [(refund_id, "COMPLETED")]
    assert [e["type"] for e in await events(db, session_id)] == ["session.completed", "refund.completed"]


async def test_a_partial_refund_mollie_fails_is_failed_and_the_amount_is_refundable_again(
    client: Client, shop: Shop, fake_mollie: FakeMollie, mollie_caller: httpx.AsyncClient, db: Database
) -> None:
    session_id, payment_id = await _paid(client, shop, fake_mollie, mollie_caller)
    assert (await refund(client, shop, session_id, "r1", amount=Decimal("40.00"))).status_code == 201
    sent = fake_mollie.only("POST", f"/v2/payments/{payment_id}/refunds")
    fake_mollie.settle_refund(sent.answer["id"], "failed")
    answer = await fake_mollie.call_webhook(payment_id, via=mollie_caller)
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


async def test_a_refund_mollie_refuses_fails_with_provider_refused(
    client: Client, shop: Shop, fake_mollie: FakeMollie, mollie_caller: httpx.AsyncClient
) -> None:
    session_id, payment_id = await _paid(client, shop, fake_mollie, mollie_caller)
    fake_mollie.fail_next("POST", f"/v2/payments/{payment_id}/refunds", 422)
    await refund(client, shop, session_id, "r1")
    stored = await record(client, shop, session_id)
    assert (stored["refunds"][0]["status"], stored["refunds"][0]["failureReason"]) == (
        "FAILED",
        "PROVIDER_REFUSED",
    )
    assert stored["status"] == "SUCCEEDED"


# --- Expiry --------------------------------------------------------------------------------------------


async def test_payorch_expiring_a_session_cancels_its_mollie_payment(
    client: Client, shop: Shop, fake_mollie: FakeMollie, mollie_caller: httpx.AsyncClient, db: Database
) -> None:
    session = await created(client, shop)
    payment_id = payment_of(fake_mollie, session["sessionId"])
    await expire_now(db, session["sessionId"])
    stored = await settled(client, shop, session["sessionId"])
    assert (stored["status"], stored["failureReason"]) == ("FAILED", "EXPIRED")
    cancelled = fake_mollie.only("DELETE", f"/v2/payments/{payment_id}")
    assert cancelled.api_key == MOLLIE_KEY
    assert cancelled.headers["idempotency-key"] == f"payorch-cancel-{payment_id}"
    assert fake_mollie.payment(payment_id)["status"] == "canceled"
    # Mollie's webhook about the cancellation follows, and changes nothing more.
    answer = await fake_mollie.call_webhook(payment_id, via=mollie_caller)
    assert answer.json()["applied"] is False
    assert [e["type"] for e in await events(db, session["sessionId"])] == ["session.expired"]


async def test_a_mollie_payment_paid_just_before_expiry_succeeds_the_session_instead(
    client: Client, shop: Shop, fake_mollie: FakeMollie, db: Database
) -> None:
    session = await created(client, shop)
    payment_id = payment_of(fake_mollie, session["sessionId"])
    fake_mollie.pay(payment_id)  # its webhook is still on the way when payorch's expiry comes
    await expire_now(db, session["sessionId"])
    stored = await settled(client, shop, session["sessionId"])
    assert (stored["status"], stored["failureReason"]) == ("SUCCEEDED", None)
    assert fake_mollie.only("DELETE", f"/v2/payments/{payment_id}").status == 422
    assert fake_mollie.requests_to("GET", f"/v2/payments/{payment_id}")[-1].status == 200


async def test_a_mollie_payment_that_may_not_be_cancelled_expires_and_a_late_payment_still_succeeds(
    client: Client, shop: Shop, fake_mollie: FakeMollie, mollie_caller: httpx.AsyncClient, db: Database
) -> None:
    session = await created(client, shop)
    payment_id = payment_of(fake_mollie, session["sessionId"])
    fake_mollie.make_uncancelable(payment_id)
    await expire_now(db, session["sessionId"])
    stored = await settled(client, shop, session["sessionId"])
    assert (stored["status"], stored["failureReason"]) == ("FAILED", "EXPIRED")
    fake_mollie.pay(payment_id)
    answer = await fake_mollie.call_webhook(payment_id, via=mollie_caller)
    assert answer.json() == {"received": True, "applied": True}
    assert (await record(client, shop, session["sessionId"]))["status"] == "SUCCEEDED"
