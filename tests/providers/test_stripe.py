"""Stripe end to end through payorch's own app, against a fake Stripe on loopback (tests/fake_stripe.py):
linking an account, a session's Checkout Session as Stripe documents it, Stripe's signed events
driving sessions and refunds, refunds through the Refunds API, and routing around a failing Stripe."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from decimal import Decimal
from typing import Any

import httpx
import pytest
import trio

from payorch.config import EngineSettings, ProviderSettings, Settings, StripeSettings
from payorch.runtime import Runtime
from payorch.storage.database import Database
from tests import fake_stripe as stripe_fake
from tests.fake_stripe import FakeStripe, ScriptedFailure
from tests.helpers import (
    Client,
    Shop,
    create_session,
    expire_now,
    link_sandbox,
    new_api_key,
    new_application,
    new_merchant,
    prefer,
    session_body,
)
from tests.providers.api_support import created as _created
from tests.providers.api_support import events as _events
from tests.providers.api_support import events_seen as _events_seen
from tests.providers.api_support import record as _record
from tests.providers.api_support import refund as _refund
from tests.providers.api_support import settled as _settled

# The SDK's HTTPXClient hands httpx the encoded form as `data=`, which httpx deprecates.
pytestmark = pytest.mark.filterwarnings("ignore:Use 'content=<...>':DeprecationWarning")

fake_stripe = stripe_fake.fake_stripe
STRIPE_KEY = "sk_test_51ShopKey0123456789abcdef"


@pytest.fixture
def settings(settings: Settings, fake_stripe: FakeStripe) -> Settings:
    """Stripe enabled, its API at the fake; the sandbox stays enabled too."""
    fake_stripe.accept_key(STRIPE_KEY)
    return settings.model_copy(
        update={"providers": ProviderSettings(stripe=StripeSettings(enabled=True, api_base=fake_stripe.url))}
    )


@pytest.fixture
async def stripe_sender(runtime: Runtime) -> AsyncIterator[httpx.AsyncClient]:
    """How the fake Stripe reaches payorch's provider-events route: HTTP into the app itself."""
    transport = httpx.ASGITransport(app=runtime.app)  # type: ignore[arg-type]  # ASGI typing differs
    async with httpx.AsyncClient(transport=transport) as client:
        yield client


async def _link_stripe(
    client: Client, merchant_headers: dict[str, str], application_id: str, api_key: str = STRIPE_KEY
) -> Any:
    return await client.post(
        f"/api/v1/applications/{application_id}/providers",
        json={
            "name": "stripe",
            "paymentMethods": ["card", "blik", "apple_pay"],
            "credentials": {"apiKey": api_key},
        },
        headers=merchant_headers,
    )


async def _stripe_shop(
    client: Client, db: Database, settings: Settings, *, with_sandbox: bool = False
) -> Shop:
    merchant = await new_merchant(client, db, settings)
    application = await new_application(client, merchant)
    linked = await _link_stripe(client, merchant.headers, application["id"])
    assert linked.status_code == 201, await linked.get_data(as_text=True)
    if with_sandbox:
        await link_sandbox(client, merchant, application["id"])
    key = await new_api_key(client, merchant, application["id"])
    return Shop(merchant=merchant, application_id=application["id"], api_key=key["key"])


@pytest.fixture
async def shop(client: Client, db: Database, settings: Settings) -> Shop:
    """A merchant's application linked to Stripe only."""
    return await _stripe_shop(client, db, settings)


def _checkout_id(fake: FakeStripe, session_id: str) -> str:
    (sent,) = [r for r in fake.requests_to("POST", "/v1/checkout/sessions") if r.status == 200]
    assert sent.form["client_reference_id"] == session_id
    checkout_id: str = sent.answer["id"]
    return checkout_id


async def _paid(
    client: Client, shop: Shop, fake: FakeStripe, sender: httpx.AsyncClient, **change: Any
) -> tuple[str, str]:
    """A session paid on Stripe, its checkout.session.completed delivered: (session id, PaymentIntent id)."""
    created = await _created(client, shop, **change)
    checkout_id = _checkout_id(fake, created["sessionId"])
    (answer,) = await fake.deliver(fake.pay(checkout_id), via=sender)
    assert answer.status_code == 200, answer.text
    assert (await _record(client, shop, created["sessionId"]))["status"] == "SUCCEEDED"
    return created["sessionId"], fake.checkout(checkout_id)["payment_intent"]


# --- Linking ---------------------------------------------------------------------------------------


async def test_linking_checks_the_key_and_registers_a_webhook_endpoint(
    client: Client, shop: Shop, fake_stripe: FakeStripe, settings: Settings
) -> None:
    balance = fake_stripe.only("GET", "/v1/balance")
    assert balance.headers["authorization"] == f"Bearer {STRIPE_KEY}"
    registered = fake_stripe.only("POST", "/v1/webhook_endpoints")
    assert registered.headers["authorization"] == f"Bearer {STRIPE_KEY}"
    assert registered.headers["stripe-version"] == stripe_fake.API_VERSION
    assert registered.form["url"] == (
        f"{settings.server.public_base_url}/api/v1/provider-events/stripe/{shop.application_id}"
    )
    assert sorted(registered.form["enabled_events"]) == [
        "charge.dispute.closed",
        "charge.refunded",
        "checkout.session.async_payment_failed",
        "checkout.session.async_payment_succeeded",
        "checkout.session.completed",
        "checkout.session.expired",
        "payment_intent.payment_failed",
        "refund.created",
        "refund.failed",
        "refund.updated",
    ]
    assert registered.form["api_version"] == stripe_fake.API_VERSION
    (endpoint,) = fake_stripe.endpoints(STRIPE_KEY)
    assert endpoint["url"] == registered.form["url"]


async def test_linking_with_a_key_stripe_rejects_is_422_and_registers_nothing(
    client: Client, db: Database, settings: Settings, fake_stripe: FakeStripe
) -> None:
    merchant = await new_merchant(client, db, settings)
    application = await new_application(client, merchant)
    response = await _link_stripe(client, merchant.headers, application["id"], api_key="sk_test_revoked_0000")
    assert response.status_code == 422
    body = await response.get_json()
    assert "stripe rejected the API key" in body["message"]
    assert "401" in body["message"]
    assert fake_stripe.only("GET", "/v1/balance").status == 401
    assert fake_stripe.requests_to("POST", "/v1/webhook_endpoints") == []
    listed = await client.get(f"/api/v1/applications/{application['id']}/providers", headers=merchant.headers)
    assert (await listed.get_json())["items"] == []


async def test_a_publishable_key_is_422_without_asking_stripe(
    client: Client, db: Database, settings: Settings, fake_stripe: FakeStripe
) -> None:
    merchant = await new_merchant(client, db, settings)
    application = await new_application(client, merchant)
    response = await _link_stripe(client, merchant.headers, application["id"], api_key="pk_test_0123456789")
    assert response.status_code == 422
    assert "sk_" in (await response.get_json())["message"]
    assert fake_stripe.requests == []


async def test_replacing_the_key_registers_a_new_endpoint_and_deletes_the_old_one(
    client: Client, shop: Shop, fake_stripe: FakeStripe
) -> None:
    second_key = "sk_test_51SecondKey9876543210"
    fake_stripe.accept_key(second_key, account=fake_stripe.account_of(STRIPE_KEY))
    (old,) = fake_stripe.endpoints(STRIPE_KEY)
    response = await client.patch(
        f"/api/v1/applications/{shop.application_id}/providers/stripe/api-key",
        json={"apiKey": second_key},
        headers=shop.merchant.headers,
    )
    assert response.status_code == 200, await response.get_data(as_text=True)
    (new,) = fake_stripe.endpoints(second_key)
    assert new["id"] != old["id"] and new["url"] == old["url"]
    assert fake_stripe.requests_to("DELETE", f"/v1/webhook_endpoints/{old['id']}")[0].status == 200


# --- Creating a session -------------------------------------------------------------------------------


async def test_creating_a_session_makes_a_checkout_session_as_stripe_documents_it(
    client: Client, shop: Shop, fake_stripe: FakeStripe
) -> None:
    created = await _created(
        client,
        shop,
        total="123.45",
        currency="PLN",
        method="blik",
        locale="pl_PL",
        redirectUrls={"success": "https://shop.example/ok", "failure": "https://shop.example/ko"},
    )
    sent = fake_stripe.only("POST", "/v1/checkout/sessions")
    assert sent.status == 200
    assert sent.headers["authorization"] == f"Bearer {STRIPE_KEY}"
    assert sent.headers["idempotency-key"] == f"payorch-session-{created['sessionId']}"
    assert sent.headers["content-type"] == "application/x-www-form-urlencoded"
    ids = {"payorch_session_id": created["sessionId"], "payorch_application_id": shop.application_id}
    expires_at = int(sent.form.pop("expires_at"))
    # Back through payorch both ways, which sends the customer on to the merchant's URLs.
    way_back = sent.form["success_url"]
    assert way_back.endswith(f"/checkout/{created['sessionId']}/return?attempt=1")
    assert sent.form == {
        "mode": "payment",
        "line_items": [
            {
                "quantity": "1",
                "price_data": {
                    "currency": "pln",
                    "unit_amount": "12345",
                    "product_data": {"name": "Order order-1001"},
                },
            }
        ],
        "allowed_payment_method_types": ["blik"],
        "client_reference_id": created["sessionId"],
        "metadata": ids,
        "payment_intent_data": {"metadata": ids},
        "success_url": way_back,
        "cancel_url": way_back,
        "customer_email": "buyer@example.com",
        "locale": "pl",
    }
    # payorch's 30-minute session is as short as Checkout allows: Stripe's expiry is clamped just above.
    assert expires_at == sent.answer["expires_at"]
    record = await _record(client, shop, created["sessionId"])
    assert created["checkoutUrl"] == sent.answer["url"]
    assert (created["routing"]["selectedProvider"], record["providerName"]) == ("stripe", "stripe")
    assert record["status"] == "PENDING"


async def test_card_and_apple_pay_are_card_checkouts_in_stripe_minor_units(
    client: Client, shop: Shop, fake_stripe: FakeStripe
) -> None:
    await _created(client, shop, "jpy", total="5000", currency="JPY", method="card")
    await _created(client, shop, "usd", total="0.50", currency="USD", method="apple_pay")
    jpy, usd = fake_stripe.requests_to("POST", "/v1/checkout/sessions")
    assert jpy.form["line_items"][0]["price_data"]["currency"] == "jpy"
    assert jpy.form["line_items"][0]["price_data"]["unit_amount"] == "5000"  # zero-decimal: yen as they are
    assert usd.form["line_items"][0]["price_data"]["unit_amount"] == "50"
    assert jpy.form["allowed_payment_method_types"] == usd.form["allowed_payment_method_types"] == ["card"]


async def test_amounts_stripe_does_not_take_are_not_routed_to_it(
    client: Client, shop: Shop, fake_stripe: FakeStripe
) -> None:
    too_small = await create_session(client, shop, "small", session_body(total="1.99", method="blik"))
    no_blik_in_eur = await create_session(client, shop, "eur", session_body(currency="EUR", method="blik"))
    for response in (too_small, no_blik_in_eur):
        assert response.status_code == 422
        assert (await response.get_json())["code"] == "NO_PROVIDER_AVAILABLE"
    assert fake_stripe.requests_to("POST", "/v1/checkout/sessions") == []


# --- Stripe's events -----------------------------------------------------------------------------------


async def test_signed_checkout_completed_succeeds_the_session_and_emits_session_completed(
    client: Client, shop: Shop, fake_stripe: FakeStripe, stripe_sender: httpx.AsyncClient, db: Database
) -> None:
    created = await _created(client, shop)
    (answer,) = await fake_stripe.deliver(
        fake_stripe.pay(_checkout_id(fake_stripe, created["sessionId"])), via=stripe_sender
    )
    assert (answer.status_code, answer.json()) == (200, {"received": True, "applied": True})
    record = await _record(client, shop, created["sessionId"])
    assert record["status"] == "SUCCEEDED"
    (event,) = await _events(db, created["sessionId"])
    assert event["type"] == "session.completed"
    assert event["data"]["id"] == created["sessionId"]
    assert event["data"]["status"] == "SUCCEEDED"


async def test_a_bad_stripe_signature_is_400_and_changes_nothing(
    client: Client, shop: Shop, fake_stripe: FakeStripe, stripe_sender: httpx.AsyncClient, db: Database
) -> None:
    created = await _created(client, shop)
    event = fake_stripe.pay(_checkout_id(fake_stripe, created["sessionId"]))
    (forged,) = await fake_stripe.deliver(event, via=stripe_sender, secret="whsec_not_the_endpoints_secret")
    (stale,) = await fake_stripe.deliver(event, via=stripe_sender, timestamp=int(time.time()) - 301)
    for answer in (forged, stale):
        assert answer.status_code == 400
        assert "event rejected" in answer.json()["message"]
    assert (await _record(client, shop, created["sessionId"]))["status"] == "PENDING"
    assert await _events(db, created["sessionId"]) == []
    assert await _events_seen(db) == 0


async def test_the_same_stripe_event_delivered_twice_is_applied_once(
    client: Client, shop: Shop, fake_stripe: FakeStripe, stripe_sender: httpx.AsyncClient, db: Database
) -> None:
    created = await _created(client, shop)
    event = fake_stripe.pay(_checkout_id(fake_stripe, created["sessionId"]))
    (first,) = await fake_stripe.deliver(event, via=stripe_sender)
    (again,) = await fake_stripe.deliver(event, via=stripe_sender)
    assert first.json() == {"received": True, "applied": True}
    assert again.json() == {"received": True, "applied": False}
    assert [e["type"] for e in await _events(db, created["sessionId"])] == ["session.completed"]


async def test_a_declined_attempt_leaves_the_session_pending(
    client: Client, shop: Shop, fake_stripe: FakeStripe, stripe_sender: httpx.AsyncClient, db: Database
) -> None:
    created = await _created(client, shop)
    checkout_id = _checkout_id(fake_stripe, created["sessionId"])
    (answer,) = await fake_stripe.deliver(fake_stripe.decline(checkout_id), via=stripe_sender)
    assert answer.status_code == 200
    assert (await _record(client, shop, created["sessionId"]))["status"] == "PENDING"
    await fake_stripe.deliver(fake_stripe.pay(checkout_id), via=stripe_sender)
    assert (await _record(client, shop, created["sessionId"]))["status"] == "SUCCEEDED"


async def test_stripe_expiring_the_checkout_before_payorch_does_changes_nothing(
    client: Client, shop: Shop, fake_stripe: FakeStripe, stripe_sender: httpx.AsyncClient
) -> None:
    created = await _created(client, shop)
    event = fake_stripe.expire(_checkout_id(fake_stripe, created["sessionId"]))
    (answer,) = await fake_stripe.deliver(event, via=stripe_sender)
    assert answer.json() == {"received": True, "applied": False}
    assert (await _record(client, shop, created["sessionId"]))["status"] == "PENDING"


async def test_a_lost_dispute_reverses_the_session_found_through_its_payment_intent(
    client: Client, shop: Shop, fake_stripe: FakeStripe, stripe_sender: httpx.AsyncClient, db: Database
) -> None:
    session_id, payment_intent = await _paid(client, shop, fake_stripe, stripe_sender)
    (answer,) = await fake_stripe.deliver(fake_stripe.lose_dispute(payment_intent), via=stripe_sender)
    assert answer.json() == {"received": True, "applied": True}
    assert (await _record(client, shop, session_id))["status"] == "REVERSED"
    assert len(fake_stripe.requests_to("GET", f"/v1/payment_intents/{payment_intent}")) == 1


async def test_a_lost_dispute_stripe_cannot_be_asked_about_is_502_and_applies_when_sent_again(
    client: Client, shop: Shop, fake_stripe: FakeStripe, stripe_sender: httpx.AsyncClient, db: Database
) -> None:
    session_id, payment_intent = await _paid(client, shop, fake_stripe, stripe_sender)
    event = fake_stripe.lose_dispute(payment_intent)
    fake_stripe.fail_next("GET", f"/v1/payment_intents/{payment_intent}", 500, 500, 500)
    (failed,) = await fake_stripe.deliver(event, via=stripe_sender)
    assert failed.status_code == 502
    assert failed.json()["message"] == "could not look the event up with Stripe"
    assert (await _record(client, shop, session_id))["status"] == "SUCCEEDED"
    assert await _events_seen(db) == 1  # the payment's event only: Stripe may send the dispute again
    (again,) = await fake_stripe.deliver(event, via=stripe_sender)
    assert again.json() == {"received": True, "applied": True}
    assert (await _record(client, shop, session_id))["status"] == "REVERSED"


# --- Expiry --------------------------------------------------------------------------------------------


async def test_payorch_expiring_a_session_expires_its_stripe_checkout_so_nobody_pays_it_after(
    client: Client, shop: Shop, fake_stripe: FakeStripe, stripe_sender: httpx.AsyncClient, db: Database
) -> None:
    created = await _created(client, shop)
    checkout_id = _checkout_id(fake_stripe, created["sessionId"])
    await expire_now(db, created["sessionId"])
    record = await _settled(client, shop, created["sessionId"])
    assert (record["status"], record["failureReason"]) == ("FAILED", "EXPIRED")
    sent = fake_stripe.only("POST", f"/v1/checkout/sessions/{checkout_id}/expire")
    assert sent.api_key == STRIPE_KEY
    assert fake_stripe.checkout(checkout_id)["status"] == "expired"
    # Stripe's own checkout.session.expired follows, and changes nothing more.
    (answer,) = await fake_stripe.deliver(fake_stripe.events[-1], via=stripe_sender)
    assert answer.json() == {"received": True, "applied": False}
    assert [e["type"] for e in await _events(db, created["sessionId"])] == ["session.expired"]


async def test_a_checkout_paid_just_before_expiry_succeeds_the_session_instead(
    client: Client, shop: Shop, fake_stripe: FakeStripe, stripe_sender: httpx.AsyncClient, db: Database
) -> None:
    created = await _created(client, shop)
    checkout_id = _checkout_id(fake_stripe, created["sessionId"])
    paid = fake_stripe.pay(checkout_id)  # its event is still on the way when payorch's expiry comes
    await expire_now(db, created["sessionId"])
    record = await _settled(client, shop, created["sessionId"])
    assert (record["status"], record["failureReason"]) == ("SUCCEEDED", None)
    (answer,) = await fake_stripe.deliver(paid, via=stripe_sender)
    assert answer.json() == {"received": True, "applied": False}
    assert [e["type"] for e in await _events(db, created["sessionId"])] == ["session.completed"]


async def test_a_session_expires_while_stripe_is_down_and_a_late_payment_still_succeeds_it(
    client: Client, shop: Shop, fake_stripe: FakeStripe, stripe_sender: httpx.AsyncClient, db: Database
) -> None:
    created = await _created(client, shop)
    checkout_id = _checkout_id(fake_stripe, created["sessionId"])
    fake_stripe.fail_next("POST", f"/v1/checkout/sessions/{checkout_id}/expire", 500, 500, 500)
    await expire_now(db, created["sessionId"])
    record = await _settled(client, shop, created["sessionId"])
    assert (record["status"], record["failureReason"]) == ("FAILED", "EXPIRED")
    # Stripe's page stayed open, and the customer paid: the money is accounted for, and refundable.
    (answer,) = await fake_stripe.deliver(fake_stripe.pay(checkout_id), via=stripe_sender)
    assert answer.json() == {"received": True, "applied": True}
    record = await _record(client, shop, created["sessionId"])
    assert (record["status"], record["failureReason"]) == ("SUCCEEDED", None)
    types = [e["type"] for e in await _events(db, created["sessionId"])]
    assert types == ["session.expired", "session.completed"]
    refunded = await _refund(client, shop, created["sessionId"], "late")
    assert refunded.status_code == 201, await refunded.get_data(as_text=True)


# --- Refunds -------------------------------------------------------------------------------------------


async def test_partial_then_full_refund_through_stripe_refunds(
    client: Client, shop: Shop, fake_stripe: FakeStripe, stripe_sender: httpx.AsyncClient, db: Database
) -> None:
    session_id, payment_intent = await _paid(client, shop, fake_stripe, stripe_sender)
    partial = await _refund(
        client, shop, session_id, "r1", amount=Decimal("30.00"), reason="REQUESTED_BY_CUSTOMER"
    )
    assert partial.status_code == 201, await partial.get_data(as_text=True)
    first = await partial.get_json()
    sent = fake_stripe.only("POST", "/v1/refunds")
    assert sent.headers["idempotency-key"] == f"payorch-refund-{first['refundId']}"
    assert sent.form == {
        "payment_intent": payment_intent,
        "amount": "3000",
        "reason": "requested_by_customer",
        "metadata": {"payorch_refund_id": first["refundId"], "payorch_session_id": session_id},
    }
    assert (await _record(client, shop, session_id))["status"] == "PARTIALLY_REFUNDED"
    await fake_stripe.deliver(fake_stripe.settle_refund(sent.answer["id"]), via=stripe_sender)
    record = await _record(client, shop, session_id)
    assert [(r["id"], r["status"]) for r in record["refunds"]] == [(first["refundId"], "COMPLETED")]

    rest = await _refund(client, shop, session_id, "r2")
    assert rest.status_code == 201
    second = await rest.get_json()
    assert second["amount"] == Decimal("70.00")
    _, sent_rest = fake_stripe.requests_to("POST", "/v1/refunds")
    assert sent_rest.form["amount"] == "7000"
    assert "reason" not in sent_rest.form
    await fake_stripe.deliver(fake_stripe.settle_refund(sent_rest.answer["id"]), via=stripe_sender)
    record = await _record(client, shop, session_id)
    assert record["status"] == "REFUNDED"
    assert {r["status"] for r in record["refunds"]} == {"COMPLETED"}
    types = [event["type"] for event in await _events(db, session_id)]
    assert types == ["session.completed", "refund.completed", "refund.completed"]


async def test_charge_refunded_completes_the_refunds_stripe_settled_once_however_often_it_comes(
    client: Client, shop: Shop, fake_stripe: FakeStripe, stripe_sender: httpx.AsyncClient, db: Database
) -> None:
    session_id, payment_intent = await _paid(client, shop, fake_stripe, stripe_sender)
    assert (await _refund(client, shop, session_id, "r1", amount=Decimal("40.00"))).status_code == 201
    assert (await _refund(client, shop, session_id, "r2", amount=Decimal("60.00"))).status_code == 201
    first, second = [r.answer["id"] for r in fake_stripe.requests_to("POST", "/v1/refunds")]
    settled = fake_stripe.settle_refund(first)  # its refund.updated is still on the way
    (answer,) = await fake_stripe.deliver(fake_stripe.charge_refunded(payment_intent), via=stripe_sender)
    assert answer.json() == {"received": True, "applied": True}
    record = await _record(client, shop, session_id)
    assert sorted(r["status"] for r in record["refunds"]) == ["COMPLETED", "PENDING"]
    assert fake_stripe.only("GET", "/v1/refunds").query == {"payment_intent": payment_intent, "limit": "100"}

    fake_stripe.settle_refund(second)
    again = fake_stripe.charge_refunded(payment_intent)
    for event in (again, again, settled):
        await fake_stripe.deliver(event, via=stripe_sender)
    record = await _record(client, shop, session_id)
    assert record["status"] == "REFUNDED"
    assert [r["status"] for r in record["refunds"]] == ["COMPLETED", "COMPLETED"]
    types = [event["type"] for event in await _events(db, session_id)]
    assert types == ["session.completed", "refund.completed", "refund.completed"]


async def test_a_refund_stripe_fails_is_failed_with_stripes_reason_and_the_balance_returns(
    client: Client, shop: Shop, fake_stripe: FakeStripe, stripe_sender: httpx.AsyncClient, db: Database
) -> None:
    session_id, _ = await _paid(client, shop, fake_stripe, stripe_sender)
    assert (await _refund(client, shop, session_id, "r1")).status_code == 201
    refund_id = fake_stripe.only("POST", "/v1/refunds").answer["id"]
    await fake_stripe.deliver(
        fake_stripe.settle_refund(refund_id, "failed", "lost_or_stolen_card"), via=stripe_sender
    )
    record = await _record(client, shop, session_id)
    assert (record["refunds"][0]["status"], record["refunds"][0]["failureReason"]) == (
        "FAILED",
        "LOST_OR_STOLEN_CARD",
    )
    assert record["status"] == "SUCCEEDED"
    events = await _events(db, session_id)
    assert events[-1]["type"] == "refund.failed"
    assert events[-1]["data"]["failureReason"] == "LOST_OR_STOLEN_CARD"


async def test_refund_events_in_any_order_complete_the_refund_once(
    client: Client, shop: Shop, fake_stripe: FakeStripe, stripe_sender: httpx.AsyncClient, db: Database
) -> None:
    session_id, _ = await _paid(client, shop, fake_stripe, stripe_sender)
    assert (await _refund(client, shop, session_id, "r1")).status_code == 201
    refund_id = fake_stripe.only("POST", "/v1/refunds").answer["id"]
    pending_created = fake_stripe.refund_created(refund_id)  # status pending: nothing to apply
    succeeded = fake_stripe.settle_refund(refund_id)
    succeeded_created = fake_stripe.refund_created(refund_id)  # a late refund.created, already succeeded
    answers = []
    for event in (succeeded, succeeded_created, pending_created, succeeded):
        (answer,) = await fake_stripe.deliver(event, via=stripe_sender)
        answers.append(answer.json()["applied"])
    assert answers == [True, False, False, False]
    assert [e["type"] for e in await _events(db, session_id)] == ["session.completed", "refund.completed"]


async def test_a_refund_stripe_refuses_fails_with_provider_refused(
    client: Client, shop: Shop, fake_stripe: FakeStripe, stripe_sender: httpx.AsyncClient
) -> None:
    session_id, _ = await _paid(client, shop, fake_stripe, stripe_sender)
    refused = {"error": {"type": "invalid_request_error", "code": "charge_disputed", "message": "disputed"}}
    fake_stripe.fail_next("POST", "/v1/refunds", ScriptedFailure(400, body=refused))
    await _refund(client, shop, session_id, "r1")
    record = await _record(client, shop, session_id)
    assert (record["refunds"][0]["status"], record["refunds"][0]["failureReason"]) == (
        "FAILED",
        "PROVIDER_REFUSED",
    )
    assert record["status"] == "SUCCEEDED"


# --- Routing around a failing Stripe ---------------------------------------------------------------


async def _prefer_stripe(client: Client, shop: Shop) -> None:
    """Without outcomes both providers rank equal and ties go by name (sandbox first): a priority
    route puts Stripe first."""
    await prefer(client, shop, "stripe", "sandbox")


async def test_stripe_answering_500_at_creation_cascades_to_the_sandbox(
    client: Client, db: Database, settings: Settings, runtime: Runtime, fake_stripe: FakeStripe
) -> None:
    shop = await _stripe_shop(client, db, settings, with_sandbox=True)
    await _prefer_stripe(client, shop)
    fake_stripe.fail_next("POST", "/v1/checkout/sessions", 500, 500, 500)
    created = await _created(client, shop)
    assert created["routing"]["selectedProvider"] == "sandbox"
    assert (await _record(client, shop, created["sessionId"]))["providerName"] == "sandbox"
    # The SDK tried three times (max_network_retries = 2), always with payorch's key.
    attempts = fake_stripe.requests_to("POST", "/v1/checkout/sessions")
    assert [a.status for a in attempts] == [500, 500, 500]
    assert {a.headers["idempotency-key"] for a in attempts} == {f"payorch-session-{created['sessionId']}"}
    assert runtime.services.context.health.snapshot(trio.current_time())["stripe"].consecutive_failures == 1


async def test_stripe_timing_out_at_creation_cascades_to_the_sandbox(
    db: Database, settings: Settings, fake_stripe: FakeStripe
) -> None:
    from payorch.runtime import open_runtime

    impatient = settings.model_copy(update={"engine": EngineSettings(provider_timeout_s=1.0)})
    async with open_runtime(impatient, db) as runtime:
        client = runtime.app.test_client()
        shop = await _stripe_shop(client, db, impatient, with_sandbox=True)
        await _prefer_stripe(client, shop)
        fake_stripe.fail_next("POST", "/v1/checkout/sessions", ScriptedFailure(200, delay_s=30))
        created = await _created(client, shop)
        record = await _record(client, shop, created["sessionId"])
        # Stripe would have answered after 30 s: the session went to the sandbox because the
        # 1 s timeout cut Stripe off, counted against Stripe's health.
        assert (
            runtime.services.context.health.snapshot(trio.current_time())["stripe"].consecutive_failures == 1
        )
    assert created["routing"]["selectedProvider"] == record["providerName"] == "sandbox"
    assert "/sandbox/checkout/" in created["checkoutUrl"]


async def test_stripe_rate_limiting_is_retried_then_succeeds(
    client: Client, shop: Shop, fake_stripe: FakeStripe
) -> None:
    limited = {
        "error": {"type": "invalid_request_error", "code": "rate_limit", "message": "Too many requests"}
    }
    fake_stripe.fail_next("POST", "/v1/checkout/sessions", ScriptedFailure(429, body=limited))
    created = await _created(client, shop)
    assert created["routing"]["selectedProvider"] == "stripe"
    assert [a.status for a in fake_stripe.requests_to("POST", "/v1/checkout/sessions")] == [429, 200]
