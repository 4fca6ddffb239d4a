"""PayU end to end through payorch's own app, against a fake PayU on loopback (tests/fake_payu.py):
linking a POS, a session's PayU order as PayU documents it, PayU's signed notifications, and the
customer's way back."""

from __future__ import annotations

import json
import uuid
from decimal import Decimal
from typing import Any

import httpx
import pytest

from payorch.config import Settings
from payorch.storage import provider_configs
from payorch.storage.database import Database
from tests import fake_payu as payu_fake
from tests.fake_payu import ORDERS, TOKEN_PATH, FakePayu
from tests.helpers import Client, Shop, new_application, new_merchant
from tests.providers import payu_support
from tests.providers.api_support import created, events, events_seen, record
from tests.providers.payu_support import (
    CLIENT_SECRET,
    POS_ID,
    PUBLIC_BASE_URL,
    SECOND_KEY,
    link_payu,
    order_of,
    payu_caller,
)

fake_payu = payu_fake.fake_payu
__all__ = ["payu_caller"]


settings = payu_support.settings_with_payu
shop = payu_support.payu_shop


async def _providers(client: Client, shop_or_merchant: Any, application_id: str) -> list[dict[str, Any]]:
    listed = await client.get(
        f"/api/v1/applications/{application_id}/providers", headers=shop_or_merchant.headers
    )
    items: list[dict[str, Any]] = (await listed.get_json())["items"]
    return items


# --- Linking ---------------------------------------------------------------------------------------


async def test_linking_asks_payu_for_a_token_and_stores_the_credentials_sealed_and_fingerprinted(
    client: Client, shop: Shop, fake_payu: FakePayu, db: Database
) -> None:
    (asked,) = fake_payu.requests
    assert (asked.method, asked.path, asked.status) == ("POST", TOKEN_PATH, 200)
    assert asked.form == {
        "grant_type": "client_credentials",
        "client_id": POS_ID,
        "client_secret": CLIENT_SECRET,
    }
    (config,) = await _providers(client, shop.merchant, shop.application_id)
    assert (config["provider"], config["isActive"]) == ("payu", True)
    assert config["keyFingerprint"] == f"pos {POS_ID}...{CLIENT_SECRET[-4:]}"
    stored = await db.autocommit(provider_configs.get_provider_config, uuid.UUID(shop.application_id), "payu")
    assert stored is not None
    for secret in (CLIENT_SECRET, SECOND_KEY):
        assert secret.encode() not in bytes(stored.credentials)
        assert stored.webhook_secret is not None and secret.encode() not in bytes(stored.webhook_secret)


async def test_the_catalogue_offers_payu_with_its_hosted_page_methods(client: Client, shop: Shop) -> None:
    listed = await client.get("/api/v1/providers", headers=shop.merchant.headers)
    (payu,) = [entry for entry in (await listed.get_json())["items"] if entry["name"] == "payu"]
    assert payu["displayName"] == "PayU"
    assert payu["paymentMethods"] == ["apple_pay", "blik", "card", "google_pay", "pay_by_link"]
    assert payu["eventDelivery"] == "signed_per_payment_url"


async def test_a_client_secret_payu_refuses_is_400_naming_the_pair_and_stores_nothing(
    client: Client, db: Database, settings: Settings, fake_payu: FakePayu
) -> None:
    merchant = await new_merchant(client, db, settings)
    application = await new_application(client, merchant)
    wrong = "0" * 32
    response = await link_payu(client, merchant, application["id"], clientSecret=wrong)
    assert response.status_code == 400
    body = await response.get_json()
    assert {d["field"] for d in body["details"]} == {"credentials.clientId", "credentials.clientSecret"}
    assert wrong not in json.dumps(body)
    assert fake_payu.only("POST", TOKEN_PATH).status == 401
    assert await _providers(client, merchant, application["id"]) == []


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"secondKey": None}, "credentials.secondKey"),
        ({"posId": "pos-300746"}, "credentials.posId"),
        ({"clientSecret": "short"}, "credentials.clientSecret"),
        ({"environment": "staging"}, "credentials.environment"),
        ({"environment": None}, "credentials.environment"),
        ({"apiKey": "sk_test_123"}, "credentials.apiKey"),
    ],
)
async def test_credentials_of_the_wrong_form_are_400_naming_the_field_without_asking_payu(
    client: Client, db: Database, settings: Settings, fake_payu: FakePayu, change: dict[str, Any], field: str
) -> None:
    merchant = await new_merchant(client, db, settings)
    application = await new_application(client, merchant)
    response = await link_payu(client, merchant, application["id"], **change)
    assert response.status_code == 400, await response.get_data(as_text=True)
    assert field in {d["field"] for d in (await response.get_json())["details"]}
    assert fake_payu.requests == []
    assert await _providers(client, merchant, application["id"]) == []


async def test_linking_while_payu_is_down_is_502_and_stores_nothing(
    client: Client, db: Database, settings: Settings, fake_payu: FakePayu
) -> None:
    merchant = await new_merchant(client, db, settings)
    application = await new_application(client, merchant)
    fake_payu.token_failures.append(503)
    response = await link_payu(client, merchant, application["id"])
    assert response.status_code == 502
    assert "payu could not be reached" in (await response.get_json())["message"]
    assert await _providers(client, merchant, application["id"]) == []


# --- Creating a session ----------------------------------------------------------------------------


async def test_a_blik_session_is_a_payu_order_returning_through_payorch(
    client: Client, shop: Shop, fake_payu: FakePayu
) -> None:
    session = await created(client, shop, total="123.45", method="blik", locale="pl_PL")
    sent = [r for r in fake_payu.requests_to("POST", ORDERS)]
    (placed,) = sent
    assert placed.status == 302
    assert placed.headers["authorization"].startswith("Bearer ")
    order = placed.json
    assert order is not None
    session_id = session["sessionId"]
    assert order["extOrderId"] == f"{session_id}-1"
    assert order["totalAmount"] == "12345" and order["currencyCode"] == "PLN"
    assert order["merchantPosId"] == POS_ID
    assert order["notifyUrl"] == f"{PUBLIC_BASE_URL}/api/v1/provider-events/payu/{shop.application_id}"
    assert order["continueUrl"] == f"{PUBLIC_BASE_URL}/checkout/{session_id}/return?attempt=1"
    assert order["payMethods"] == {"payMethod": {"type": "PBL", "value": "blik"}}
    assert order["buyer"] == {"email": "buyer@example.com", "language": "pl"}
    assert order["validityTime"] == "1800"  # sessions.ttl_s
    assert session["checkoutUrl"] == placed.answer["redirectUri"]
    assert (await record(client, shop, session_id))["providerName"] == "payu"


async def test_a_pay_by_link_session_lets_the_customer_choose_the_bank_on_payus_page(
    client: Client, shop: Shop, fake_payu: FakePayu
) -> None:
    await created(client, shop, method="pay_by_link")
    placed = fake_payu.only("POST", ORDERS).json
    assert placed is not None and "payMethods" not in placed


async def test_a_blik_session_in_euro_is_not_offered_by_payu(client: Client, shop: Shop) -> None:
    response = await client.get(
        "/api/v1/payment-methods", query_string={"currency": "EUR", "amount": "10.00"}, headers=shop.headers
    )
    assert "blik" not in (await response.get_json())["paymentMethods"]


# --- Notifications ---------------------------------------------------------------------------------


async def test_a_blik_payment_on_payus_page_succeeds_the_session_once_payu_notifies(
    client: Client, shop: Shop, fake_payu: FakePayu, payu_caller: httpx.AsyncClient, db: Database
) -> None:
    session = await created(client, shop, method="blik")
    order = order_of(fake_payu, session["sessionId"])
    async with httpx.AsyncClient() as customer:
        paid = await customer.post(
            f"{fake_payu.url}/pay/", data={"orderId": order["orderId"], "outcome": "pay"}
        )
    assert paid.status_code == 302 and paid.headers["location"].endswith("/return?attempt=1")
    answers = await fake_payu.deliver(payu_caller)
    assert [a.json() for a in answers] == [
        {"received": True, "applied": False},  # PENDING: nothing yet
        {"received": True, "applied": True},  # COMPLETED
    ]
    stored = await record(client, shop, session["sessionId"])
    assert stored["status"] == "SUCCEEDED"
    assert [e["type"] for e in await events(db, session["sessionId"])] == ["session.completed"]


async def test_a_declined_blik_payment_leaves_the_session_pending(
    client: Client, shop: Shop, fake_payu: FakePayu, payu_caller: httpx.AsyncClient, db: Database
) -> None:
    session = await created(client, shop, method="blik")
    fake_payu.decline(order_of(fake_payu, session["sessionId"])["orderId"])
    answers = await fake_payu.deliver(payu_caller)
    assert all(a.status_code == 200 for a in answers)
    assert (await record(client, shop, session["sessionId"]))["status"] == "PENDING"
    assert await events(db, session["sessionId"]) == []


async def test_duplicated_and_reordered_notifications_apply_once(
    client: Client, shop: Shop, fake_payu: FakePayu, payu_caller: httpx.AsyncClient, db: Database
) -> None:
    session = await created(client, shop, method="blik")
    fake_payu.pay(order_of(fake_payu, session["sessionId"])["orderId"])
    answers = await fake_payu.deliver(
        payu_caller, repeat=2, reverse=True
    )  # COMPLETED twice, then PENDING twice
    assert [a.json()["applied"] for a in answers] == [True, False, False, False]
    assert (await record(client, shop, session["sessionId"]))["status"] == "SUCCEEDED"
    assert [e["type"] for e in await events(db, session["sessionId"])] == ["session.completed"]


async def test_a_notification_signed_with_sha256_is_accepted(
    client: Client, shop: Shop, fake_payu: FakePayu, payu_caller: httpx.AsyncClient
) -> None:
    fake_payu.algorithm = "SHA-256"
    session = await created(client, shop, method="blik")
    fake_payu.pay(order_of(fake_payu, session["sessionId"])["orderId"])
    await fake_payu.deliver(payu_caller)
    assert (await record(client, shop, session["sessionId"]))["status"] == "SUCCEEDED"


def _completed_notification(fake: FakePayu, session_id: str) -> bytes:
    order = order_of(fake, session_id)
    fake.pay(order["orderId"])
    completed = fake.owed[-1].body
    fake.owed.clear()
    return completed


@pytest.mark.parametrize(
    "forge",
    [
        pytest.param(lambda fake, body: {}, id="missing"),
        pytest.param(lambda fake, body: {"OpenPayu-Signature": fake.signed(body, "f" * 32)}, id="forged"),
        pytest.param(
            lambda fake, body: {
                "OpenPayu-Signature": fake.signed(body, SECOND_KEY, "MD5").replace("MD5", "SHA-256")
            },
            id="wrong-algorithm",
        ),
        pytest.param(
            lambda fake, body: {
                "OpenPayu-Signature": fake.signed(body, SECOND_KEY, "MD5").replace("MD5", "SHA1")
            },
            id="sha1",
        ),
        pytest.param(
            lambda fake, body: {
                "OpenPayu-Signature": fake.signed(body.replace(b"COMPLETED", b"PENDING"), SECOND_KEY)
            },
            id="signature-of-another-body",
        ),
    ],
)
async def test_a_notification_not_signed_with_the_second_key_is_refused_and_nothing_is_stored(
    client: Client,
    shop: Shop,
    fake_payu: FakePayu,
    payu_caller: httpx.AsyncClient,
    db: Database,
    forge: Any,
) -> None:
    session = await created(client, shop, method="blik")
    body = _completed_notification(fake_payu, session["sessionId"])
    answer = await payu_caller.post(
        f"{PUBLIC_BASE_URL}/api/v1/provider-events/payu/{shop.application_id}",
        content=body,
        headers={"Content-Type": "application/json", **forge(fake_payu, body)},
    )
    assert answer.status_code == 400
    assert "OpenPayu-Signature" in answer.json()["message"]
    assert await events_seen(db) == 0
    assert (await record(client, shop, session["sessionId"]))["status"] == "PENDING"


async def test_a_replayed_notification_changes_nothing_more(
    client: Client, shop: Shop, fake_payu: FakePayu, payu_caller: httpx.AsyncClient, db: Database
) -> None:
    session = await created(client, shop, method="blik")
    body = _completed_notification(fake_payu, session["sessionId"])
    url = f"{PUBLIC_BASE_URL}/api/v1/provider-events/payu/{shop.application_id}"
    headers = {"Content-Type": "application/json", "OpenPayu-Signature": fake_payu.signed(body, SECOND_KEY)}
    first = await payu_caller.post(url, content=body, headers=headers)
    seen = await events_seen(db)
    again = await payu_caller.post(url, content=body, headers=headers)
    assert (first.json()["applied"], again.json()["applied"]) == (True, False)
    assert await events_seen(db) == seen
    assert [e["type"] for e in await events(db, session["sessionId"])] == ["session.completed"]


async def test_a_notification_of_another_applications_order_is_refused_with_this_applications_key(
    client: Client,
    db: Database,
    settings: Settings,
    shop: Shop,
    fake_payu: FakePayu,
    payu_caller: httpx.AsyncClient,
) -> None:
    other_key = "a" * 32
    fake_payu.accept_pos("400100", "400100", "c" * 32, other_key)
    other = await new_merchant(client, db, settings)
    application = await new_application(client, other)
    linked = await link_payu(
        client,
        other,
        application["id"],
        posId="400100",
        clientId="400100",
        clientSecret="c" * 32,
        secondKey=other_key,
    )
    assert linked.status_code == 201
    session = await created(client, shop, method="blik")
    body = _completed_notification(fake_payu, session["sessionId"])
    answer = await payu_caller.post(
        f"{PUBLIC_BASE_URL}/api/v1/provider-events/payu/{application['id']}",
        content=body,
        headers={
            "Content-Type": "application/json",
            "OpenPayu-Signature": fake_payu.signed(body, SECOND_KEY),
        },
    )
    assert answer.status_code == 400
    assert (await record(client, shop, session["sessionId"]))["status"] == "PENDING"


# --- The way back ----------------------------------------------------------------------------------


async def test_the_customer_back_from_a_paid_order_is_sent_to_the_merchants_success_url(
    client: Client, shop: Shop, fake_payu: FakePayu
) -> None:
    urls = {"success": "https://shop.example/thanks", "failure": "https://shop.example/sorry"}
    session = await created(client, shop, method="blik", redirectUrls=urls)
    order = order_of(fake_payu, session["sessionId"])
    fake_payu.pay(order["orderId"])
    back = await client.get(f"/checkout/{session['sessionId']}/return", query_string={"attempt": "1"})
    assert back.status_code == 303
    assert back.headers["Location"] == urls["success"]
    assert fake_payu.requests_to("GET", f"{ORDERS}/{order['orderId']}")[-1].status == 200


async def test_the_customer_back_while_blik_waits_for_the_bank_is_not_sent_to_failure(
    client: Client, shop: Shop, fake_payu: FakePayu
) -> None:
    urls = {"success": "https://shop.example/thanks", "failure": "https://shop.example/sorry"}
    session = await created(client, shop, method="blik", redirectUrls=urls)
    order = order_of(fake_payu, session["sessionId"])
    fake_payu.order(order["orderId"])["status"] = "PENDING"
    back = await client.get(f"/checkout/{session['sessionId']}/return", query_string={"attempt": "1"})
    assert back.headers.get("Location") != urls["failure"]


# --- Amounts ---------------------------------------------------------------------------------------


async def test_an_amount_in_czech_crowns_is_sent_in_minor_units(
    client: Client, shop: Shop, fake_payu: FakePayu
) -> None:
    await created(client, shop, total="1999.50", currency="CZK", method="card")
    placed = fake_payu.only("POST", ORDERS).json
    assert placed is not None
    assert (placed["totalAmount"], placed["currencyCode"]) == ("199950", "CZK")
    assert placed["payMethods"]["payMethod"]["value"] == "c"
    assert Decimal(placed["totalAmount"]) / 100 == Decimal("1999.50")


async def test_replacing_the_credentials_takes_the_five_fields_and_checks_them_with_payu(
    client: Client, shop: Shop, fake_payu: FakePayu
) -> None:
    fake_payu.accept_pos(POS_ID, "300747", "e" * 32, "f" * 32)
    url = f"/api/v1/applications/{shop.application_id}/providers/payu/api-key"
    changed = {"posId": POS_ID, "clientId": "300747", "clientSecret": "e" * 32, "secondKey": "f" * 32}
    refused = await client.patch(
        url,
        json={**changed, "environment": "sandbox", "clientSecret": "1" * 32},
        headers=shop.merchant.headers,
    )
    assert refused.status_code == 400
    assert {d["field"] for d in (await refused.get_json())["details"]} == {"clientId", "clientSecret"}
    replaced = await client.patch(
        url, json={**changed, "environment": "sandbox"}, headers=shop.merchant.headers
    )
    assert replaced.status_code == 200, await replaced.get_data(as_text=True)
    (config,) = await _providers(client, shop.merchant, shop.application_id)
    assert config["keyFingerprint"] == f"pos {POS_ID}...eeee"
    assert fake_payu.token_requests()[-1].form["client_id"] == "300747"


async def test_the_customer_back_from_a_declined_order_with_payus_error_parameter_goes_to_failure(
    client: Client, shop: Shop, fake_payu: FakePayu
) -> None:
    urls = {"success": "https://shop.example/thanks", "failure": "https://shop.example/sorry"}
    session = await created(client, shop, method="blik", redirectUrls=urls)
    fake_payu.decline(order_of(fake_payu, session["sessionId"])["orderId"])
    back = await client.get(
        f"/checkout/{session['sessionId']}/return", query_string={"attempt": "1", "error": "501"}
    )
    assert back.status_code == 303
    assert back.headers["Location"] == urls["failure"]
