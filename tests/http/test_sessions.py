"""Checkout sessions: creation with Idempotency-Key, routing to the sandbox, reads and lists."""

from __future__ import annotations

import dataclasses
import uuid
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest
import trio

from payorch.config import Settings
from payorch.engine.idempotency import request_fingerprint
from payorch.engine.payments.checkout import CreateSession
from payorch.jsonexact import dumps_exact, loads_exact
from payorch.storage import idempotency_keys
from payorch.storage.database import Connection, Database
from tests.clock import ShiftedClock
from tests.helpers import (
    Client,
    Shop,
    create_session,
    eventually,
    new_merchant,
    new_shop,
    post_json,
    session_body,
)
from tests.storage.test_claim_takeover import another_node


@pytest.fixture
async def shop(client: Client, db: Database, settings: Settings) -> Shop:
    return await new_shop(client, db, settings)


async def _count_sessions(conn: Connection) -> int:
    return int(await conn.fetchval("SELECT count(*) FROM checkout_sessions"))


async def test_create_answers_201_with_checkout_url_and_routing(client: Client, shop: Shop) -> None:
    response = await create_session(client, shop, "key-1")
    assert response.status_code == 201
    body = await response.get_json()
    assert body["status"] == "PENDING"
    assert body["routing"]["selectedProvider"] == "sandbox"
    assert 0 <= body["routing"]["score"] <= 1
    assert "/sandbox/checkout/" in body["checkoutUrl"]
    assert body["expiresAt"] > body["createdAt"]
    uuid.UUID(body["sessionId"])


async def test_session_expires_after_the_configured_ttl(
    client: Client, shop: Shop, settings: Settings
) -> None:
    from datetime import datetime

    body = await (await create_session(client, shop, "key-1")).get_json()
    lifetime = datetime.fromisoformat(body["expiresAt"]) - datetime.fromisoformat(body["createdAt"])
    assert abs(lifetime.total_seconds() - settings.sessions.ttl_s) < 5


async def test_read_record_after_create(client: Client, shop: Shop) -> None:
    created = await (await create_session(client, shop, "key-1")).get_json()
    response = await client.get(f"/api/v1/sessions/{created['sessionId']}", headers=shop.headers)
    assert response.status_code == 200
    record = await response.get_json()
    assert record["id"] == created["sessionId"]
    assert record["status"] == "PENDING"
    assert record["amount"] == Decimal("100.00")
    assert record["currency"] == "PLN"
    assert record["providerName"] == "sandbox"
    assert record["paymentMethod"] == "card"
    assert record["failureReason"] is None
    assert record["refunds"] is None


async def test_amount_is_written_with_the_currency_decimals(client: Client, shop: Shop) -> None:
    created = await (await create_session(client, shop, "key-1", session_body(total="12.5"))).get_json()
    response = await client.get(f"/api/v1/sessions/{created['sessionId']}", headers=shop.headers)
    assert '"amount":12.50' in (await response.get_data(as_text=True)).replace(" ", "")


async def test_same_key_and_body_replays_the_first_answer(client: Client, shop: Shop, db: Database) -> None:
    first = await create_session(client, shop, "key-1")
    again = await create_session(client, shop, "key-1")
    assert again.status_code == 201
    assert await again.get_json() == await first.get_json()
    assert again.headers.get("Idempotent-Replayed") == "true"
    assert first.headers.get("Idempotent-Replayed") is None
    assert await db.autocommit(_count_sessions) == 1


async def test_same_key_with_reordered_keys_and_other_number_spelling_is_the_same_request(
    client: Client, shop: Shop
) -> None:
    first = await client.post(
        "/api/v1/sessions",
        data='{"orderReference":"o","paymentMethod":"card","currency":"PLN","amount":{"total":10.5},'
        '"customer":{"email":"b@example.com"}}',
        headers={**shop.headers, "Idempotency-Key": "k", "Content-Type": "application/json"},
    )
    again = await client.post(
        "/api/v1/sessions",
        data='{"customer":{"email":"b@example.com"},"amount":{"total":10.50},"currency":"PLN",'
        '"paymentMethod":"card","orderReference":"o"}',
        headers={**shop.headers, "Idempotency-Key": "k", "Content-Type": "application/json"},
    )
    assert first.status_code == 201
    assert again.headers.get("Idempotent-Replayed") == "true"


async def test_same_key_with_another_body_is_422_mismatch(client: Client, shop: Shop, db: Database) -> None:
    await create_session(client, shop, "key-1")
    response = await create_session(client, shop, "key-1", session_body(total="99.00"))
    assert response.status_code == 422
    assert await response.get_json() == {
        "message": "this Idempotency-Key was used with different parameters",
        "statusCode": 422,
        "code": "IDEMPOTENCY_KEY_MISMATCH",
    }
    assert await db.autocommit(_count_sessions) == 1


async def test_same_key_sent_10_times_at_once_creates_one_session(
    client: Client, shop: Shop, db: Database
) -> None:
    answers: list[Any] = []

    async def send() -> None:
        answers.append(await create_session(client, shop, "same-key"))

    async with trio.open_nursery() as senders:
        for _ in range(10):
            senders.start_soon(send)
    statuses = sorted(answer.status_code for answer in answers)
    assert set(statuses) <= {201, 409}
    assert 201 in statuses
    ids = {(await answer.get_json())["sessionId"] for answer in answers if answer.status_code == 201}
    assert len(ids) == 1
    for answer in answers:
        if answer.status_code == 409:
            body = await answer.get_json()
            assert body["code"] == "IDEMPOTENCY_KEY_IN_PROGRESS"
            assert body["retryAfter"] >= 1
            assert answer.headers["Retry-After"] == str(body["retryAfter"])
    assert await db.autocommit(_count_sessions) == 1


async def test_key_claimed_by_another_process_is_409_in_progress(
    client: Client, shop: Shop, db: Database
) -> None:
    # A claim in the database, as a second service process would hold it while it works.
    await db.transaction(
        idempotency_keys.claim_idempotency_key,
        application_id=uuid.UUID(shop.application_id),
        scope="POST /api/v1/sessions",
        key="key-1",
        fingerprint=b"\0" * 32,
        lease_s=60,
        retention_s=86400,
        owner=None,
        now=datetime.now(UTC),
    )
    response = await create_session(client, shop, "key-1")
    # The stored fingerprint is another request's: a mismatch is reported before "in progress".
    assert response.status_code == 422


async def test_a_create_retried_after_its_node_died_keeps_the_first_requests_expiry(
    client: Client, shop: Shop, db: Database, settings: Settings, clock: ShiftedClock
) -> None:
    """The retry takes the dead node's claim over and asks the provider with the deadline the first
    request had, so a provider that stores parameters under its idempotency key sees the same ones."""
    body = session_body()
    sent = loads_exact(dumps_exact(body))
    fingerprint = request_fingerprint({**sent, "applicationId": shop.application_id}, "POST /api/v1/sessions")
    first_claimed_at = clock.now()
    async with another_node(db) as gone:
        await db.transaction(
            idempotency_keys.claim_idempotency_key,
            application_id=uuid.UUID(shop.application_id),
            scope="POST /api/v1/sessions",
            key="key-1",
            fingerprint=fingerprint,
            lease_s=60,
            retention_s=86400,
            owner=gone,
            now=first_claimed_at,
        )
    clock.advance(30)
    response = await create_session(client, shop, "key-1", body)
    assert response.status_code == 201, await response.get_data(as_text=True)
    created = await response.get_json()
    expected = first_claimed_at + timedelta(seconds=settings.sessions.ttl_s)
    assert datetime.fromisoformat(created["expiresAt"]) == expected.replace(
        microsecond=expected.microsecond // 1000 * 1000
    )


async def test_missing_idempotency_key_is_400(client: Client, shop: Shop) -> None:
    response = await post_json(client, "/api/v1/sessions", session_body(), shop.headers)
    assert response.status_code == 400
    assert (await response.get_json())["details"][0]["field"] == "Idempotency-Key"


async def test_idempotency_key_over_255_characters_is_400(client: Client, shop: Shop) -> None:
    assert (await create_session(client, shop, "k" * 256)).status_code == 400
    assert (await create_session(client, shop, "k" * 255)).status_code == 201


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"amount": {"total": Decimal("0")}}, "amount.total"),
        ({"amount": {"total": Decimal("-1")}}, "amount.total"),
        ({"amount": {"total": "10.00"}}, "amount.total"),
        ({"amount": {"total": Decimal("10.001")}}, "amount.total"),
        ({"amount": {"total": Decimal("10"), "tax": Decimal("-1")}}, "amount.tax"),
        ({"currency": "ZZZ"}, "currency"),
        ({"currency": "pln"}, "currency"),
        ({"paymentMethod": "cash"}, "paymentMethod"),
        ({"locale": "pl-PL"}, "locale"),
        ({"orderReference": ""}, "orderReference"),
        ({"customer": {"firstName": "Jan"}}, "customer.email"),
        ({"redirectUrls": {"success": "ftp://x"}}, "redirectUrls.success"),
        (
            {"orderItems": [{"name": "Mug", "quantity": 0, "unitPrice": Decimal("1")}]},
            "orderItems.0.quantity",
        ),
        (
            {
                "customer": {
                    "email": "b@example.com",
                    "billingAddress": {"line1": "x", "city": "y", "postalCode": "1", "country": "XX"},
                }
            },
            "customer.billingAddress.country",
        ),
        ({"unexpected": 1}, "unexpected"),
    ],
)
async def test_invalid_session_is_400_naming_the_field(
    client: Client, shop: Shop, db: Database, change: dict[str, Any], field: str
) -> None:
    response = await create_session(client, shop, "key-1", session_body(**change))
    assert response.status_code == 400
    fields = [item["field"] for item in (await response.get_json())["details"]]
    assert any(item == field or item.startswith(field + ".") for item in fields), fields
    assert await db.autocommit(_count_sessions) == 0


async def test_jpy_takes_no_decimals(client: Client, db: Database, settings: Settings) -> None:
    shop = await new_shop(client, db, settings)
    assert (
        await create_session(client, shop, "a", session_body(total="1000", currency="JPY"))
    ).status_code == 201
    assert (
        await create_session(client, shop, "b", session_body(total="10.5", currency="JPY"))
    ).status_code == 400


async def test_blik_outside_pln_has_no_provider_422(client: Client, shop: Shop, db: Database) -> None:
    response = await create_session(client, shop, "key-1", session_body(currency="EUR", method="blik"))
    assert response.status_code == 422
    assert (await response.get_json())["code"] == "NO_PROVIDER_AVAILABLE"
    assert await db.autocommit(_count_sessions) == 0


async def test_no_provider_linked_is_422_and_the_key_can_be_retried(
    client: Client, db: Database, settings: Settings
) -> None:
    merchant = await new_merchant(client, db, settings)
    created = await client.post("/api/v1/applications", json={"name": "bare"}, headers=merchant.headers)
    application_id = (await created.get_json())["id"]
    body = session_body(applicationId=application_id)
    headers = {**merchant.headers, "Idempotency-Key": "k"}
    response = await post_json(client, "/api/v1/sessions", body, headers)
    assert response.status_code == 422
    assert (await response.get_json())["code"] == "NO_PROVIDER_AVAILABLE"
    await client.post(
        f"/api/v1/applications/{application_id}/providers",
        json={
            "name": "sandbox",
            "paymentMethods": ["card"],
            "credentials": {"apiKey": "sk_sandbox_abcdefgh"},
        },
        headers=merchant.headers,
    )
    assert (await post_json(client, "/api/v1/sessions", body, headers)).status_code == 201


async def test_jwt_caller_names_the_application(client: Client, shop: Shop) -> None:
    headers = {**shop.merchant.headers, "Idempotency-Key": "k"}
    missing = await post_json(client, "/api/v1/sessions", session_body(), headers)
    assert missing.status_code == 400
    named = await post_json(
        client, "/api/v1/sessions", session_body(applicationId=shop.application_id), headers
    )
    assert named.status_code == 201


async def test_api_key_naming_another_application_is_403(client: Client, shop: Shop) -> None:
    response = await create_session(client, shop, "k", session_body(applicationId=str(uuid.uuid4())))
    assert response.status_code == 403


async def test_disabled_application_cannot_create_sessions(client: Client, shop: Shop) -> None:
    await client.patch(
        f"/api/v1/applications/{shop.application_id}/status",
        json={"isEnabled": False},
        headers=shop.merchant.headers,
    )
    assert (await create_session(client, shop, "k")).status_code == 403
    response = await post_json(
        client,
        "/api/v1/sessions",
        session_body(applicationId=shop.application_id),
        {**shop.merchant.headers, "Idempotency-Key": "k2"},
    )
    assert response.status_code == 403


async def test_another_merchants_session_is_404(
    client: Client, shop: Shop, db: Database, settings: Settings
) -> None:
    created = await (await create_session(client, shop, "k")).get_json()
    stranger = await new_shop(client, db, settings)
    for headers in (stranger.headers, stranger.merchant.headers):
        response = await client.get(f"/api/v1/sessions/{created['sessionId']}", headers=headers)
        assert response.status_code == 404
    assert (
        await client.get(f"/api/v1/sessions/{created['sessionId']}", headers=shop.merchant.headers)
    ).status_code == 200


async def test_list_sessions_of_an_application_newest_first(client: Client, shop: Shop) -> None:
    first = await (await create_session(client, shop, "a")).get_json()
    second = await (await create_session(client, shop, "b", session_body(total="5.00"))).get_json()
    response = await client.get(f"/api/v1/applications/{shop.application_id}/sessions", headers=shop.headers)
    body = await response.get_json()
    assert [item["id"] for item in body["items"]] == [second["sessionId"], first["sessionId"]]
    assert body["items"][0]["amount"] == Decimal("5.00")


async def test_actor_crash_is_500_with_request_id_and_the_next_request_works(
    client: Client, shop: Shop, monkeypatch: pytest.MonkeyPatch
) -> None:
    original = CreateSession.__dict__["run_batch"]  # the classmethod itself

    async def crash_once(cls: type[CreateSession], actor: Any, batch: Any) -> None:
        monkeypatch.setattr(CreateSession, "run_batch", original)
        raise RuntimeError("simulated bug inside the actor")

    monkeypatch.setattr(CreateSession, "run_batch", classmethod(crash_once))
    crashed = await create_session(client, shop, "k")
    assert crashed.status_code == 500
    body = await crashed.get_json()
    assert body["requestId"] == crashed.headers["X-Request-Id"]
    assert "simulated" not in await crashed.get_data(as_text=True)
    assert (await create_session(client, shop, "k2")).status_code == 201


# --- Redirect URLs --------------------------------------------------------------------------------


async def _redirect_urls_stored(db: Database) -> Any:
    async def read(conn: Connection) -> Any:
        return await conn.fetchval("SELECT redirect_urls FROM checkout_sessions")

    return await db.autocommit(read)


async def test_redirect_url_with_crlf_is_400(client: Client, shop: Shop, db: Database) -> None:
    urls = {"success": "https://shop.example/ok\r\nSet-Cookie: session=stolen"}
    response = await create_session(client, shop, "k", session_body(redirectUrls=urls))
    assert response.status_code == 400
    assert [item["field"] for item in (await response.get_json())["details"]] == ["redirectUrls.success"]
    assert await db.autocommit(_count_sessions) == 0


async def test_redirect_url_ending_in_crlf_is_400_not_trimmed(client: Client, shop: Shop) -> None:
    urls = {"failure": "https://shop.example/ko\r\n"}
    response = await create_session(client, shop, "k", session_body(redirectUrls=urls))
    assert response.status_code == 400
    assert [item["field"] for item in (await response.get_json())["details"]] == ["redirectUrls.failure"]


@pytest.mark.parametrize(
    "url",
    [
        "https://shop.example/\tok",
        "https://shop.example/o k",
        " https://shop.example/ok",
        "https://shop.example/\x1bok",
        "https://shop.example/\x7fok",
        "https://shop.example/\u200bok",
        "https://shop.example/\u2028ok",
    ],
)
async def test_redirect_url_with_control_characters_or_white_space_is_400(
    client: Client, shop: Shop, url: str
) -> None:
    response = await create_session(client, shop, "k", session_body(redirectUrls={"success": url}))
    assert response.status_code == 400
    assert [item["field"] for item in (await response.get_json())["details"]] == ["redirectUrls.success"]


@pytest.mark.parametrize(
    "url", ["/ok", "shop.example/ok", "https:///ok", "javascript:alert(1)", "https://shop.example/caf\u00e9"]
)
async def test_redirect_url_that_is_not_an_absolute_https_url_is_400(
    client: Client, shop: Shop, url: str
) -> None:
    response = await create_session(client, shop, "k", session_body(redirectUrls={"success": url}))
    assert response.status_code == 400


async def test_http_redirect_url_to_a_public_host_is_400(client: Client, shop: Shop) -> None:
    urls = {"success": "http://shop.example/ok"}
    response = await create_session(client, shop, "k", session_body(redirectUrls=urls))
    assert response.status_code == 400
    assert [item["field"] for item in (await response.get_json())["details"]] == ["redirectUrls.success"]


async def test_http_redirect_url_to_localhost_is_accepted_for_local_development(
    client: Client, shop: Shop, db: Database
) -> None:
    urls = {"success": "http://localhost:3000/ok", "failure": "http://127.0.0.1:3000/ko"}
    response = await create_session(client, shop, "k", session_body(redirectUrls=urls))
    assert response.status_code == 201
    assert await _redirect_urls_stored(db) == urls


async def test_redirect_url_is_stored_exactly_as_validated(client: Client, shop: Shop, db: Database) -> None:
    urls = {"success": "https://shop.example/return?order=1001&s=%C3%A9#done"}
    response = await create_session(client, shop, "k", session_body(redirectUrls=urls))
    assert response.status_code == 201
    assert await _redirect_urls_stored(db) == urls


# --- Amounts and currencies -----------------------------------------------------------------------


async def test_total_below_shipping_plus_tax_is_400(client: Client, shop: Shop, db: Database) -> None:
    amount = {"total": Decimal("10.00"), "shipping": Decimal("6.00"), "tax": Decimal("4.01")}
    response = await create_session(client, shop, "k", session_body(amount=amount))
    assert response.status_code == 400
    body = await response.get_json()
    assert body["code"] == 400
    assert [item["field"] for item in body["details"]] == ["amount.total"]
    assert await db.autocommit(_count_sessions) == 0


async def test_total_equal_to_shipping_plus_tax_is_accepted(client: Client, shop: Shop) -> None:
    amount = {"total": Decimal("10.00"), "shipping": Decimal("6.00"), "tax": Decimal("4.00")}
    assert (await create_session(client, shop, "k", session_body(amount=amount))).status_code == 201


async def _post_raw_session(client: Client, shop: Shop, amount_json: str) -> Any:
    """A session body whose amount is written as given: numbers no Decimal helper would spell."""
    return await client.post(
        "/api/v1/sessions",
        data='{"orderReference":"o","paymentMethod":"card","currency":"PLN",'
        f'"amount":{amount_json},"customer":{{"email":"b@example.com"}}}}',
        headers={**shop.headers, "Idempotency-Key": "k", "Content-Type": "application/json"},
    )


@pytest.mark.parametrize("total", ["1e-999", "0.001", "1E-3", "0.009999999999999999999999999999999"])
async def test_total_below_one_minor_unit_is_400_not_rounded(
    client: Client, shop: Shop, db: Database, total: str
) -> None:
    response = await _post_raw_session(client, shop, f'{{"total":{total}}}')
    assert response.status_code == 400
    assert [item["field"] for item in (await response.get_json())["details"]] == ["amount.total"]
    assert await db.autocommit(_count_sessions) == 0


async def test_total_with_an_extreme_negative_exponent_is_400(
    client: Client, shop: Shop, db: Database
) -> None:
    # Refused before it is a number at all or by its decimals; never rounded to 0 minor units.
    response = await _post_raw_session(client, shop, '{"total":1e-999999999}')
    assert response.status_code == 400
    assert await db.autocommit(_count_sessions) == 0


async def test_shipping_far_below_one_minor_unit_is_400(client: Client, shop: Shop) -> None:
    response = await _post_raw_session(client, shop, '{"total":10,"shipping":1e-999}')
    assert response.status_code == 400
    assert [item["field"] for item in (await response.get_json())["details"]] == ["amount.shipping"]


@pytest.mark.parametrize("currency", ["XXX", "XTS", "XAU", "XAG", "XDR", "XSU", "XUA", "XBA"])
async def test_x_code_that_is_not_a_currency_is_400(
    client: Client, shop: Shop, db: Database, currency: str
) -> None:
    response = await create_session(client, shop, "k", session_body(currency=currency))
    assert response.status_code == 400
    assert [item["field"] for item in (await response.get_json())["details"]] == ["currency"]
    assert await db.autocommit(_count_sessions) == 0


@pytest.mark.parametrize("currency", ["BOV", "CHE", "CHW", "CLF", "COU", "MXV", "USN", "UYI", "UYW"])
async def test_a_fund_code_or_unit_of_account_is_400(
    client: Client, shop: Shop, db: Database, currency: str
) -> None:
    response = await create_session(client, shop, "k", session_body(currency=currency))
    assert response.status_code == 400
    (problem,) = (await response.get_json())["details"]
    assert problem["field"] == "currency"
    assert "fund or unit of account" in problem["message"]
    assert await db.autocommit(_count_sessions) == 0


@pytest.mark.parametrize(
    ("currency", "total"), [("XOF", "5000"), ("XAF", "5000"), ("XPF", "1000"), ("XCD", "10.50")]
)
async def test_x_code_that_is_a_currency_is_accepted(
    client: Client, shop: Shop, currency: str, total: str
) -> None:
    response = await create_session(client, shop, "k", session_body(total=total, currency=currency))
    assert response.status_code == 201, await response.get_data(as_text=True)


# --- Provider configurations held by the actor -----------------------------------------------------


async def test_a_method_removed_from_the_provider_is_refused_on_the_very_next_session(
    client: Client, shop: Shop
) -> None:
    assert (await create_session(client, shop, "before")).status_code == 201  # the actor holds them now
    response = await client.patch(
        f"/api/v1/applications/{shop.application_id}/providers/sandbox/payment-methods",
        json={"paymentMethods": ["blik"]},
        headers=shop.merchant.headers,
    )
    assert response.status_code == 200
    refused = await create_session(client, shop, "after")
    assert refused.status_code == 422
    assert (await refused.get_json())["code"] == "NO_PROVIDER_AVAILABLE"


async def test_a_configuration_changed_by_another_process_routes_as_soon_as_its_notification_arrives(
    client: Client, shop: Shop, db: Database
) -> None:
    assert (await create_session(client, shop, "before")).status_code == 201

    async def change_elsewhere(conn: Connection) -> None:
        # Another payorch process writes the table: its trigger notifies every process on commit.
        await conn.execute(
            "UPDATE provider_configs SET payment_methods = '{blik}' WHERE application_id = $1",
            uuid.UUID(shop.application_id),
        )

    await db.transaction(change_elsewhere)
    attempts = iter(range(1000))

    async def refused() -> bool:
        response = await create_session(client, shop, f"after-{next(attempts)}")
        return response.status_code == 422

    await eventually(refused)


async def test_a_session_the_database_refuses_fails_alone_and_the_others_stored_with_it_are_created(
    client: Client, shop: Shop, monkeypatch: pytest.MonkeyPatch
) -> None:
    original = CreateSession.new_session

    def refused_for_one_key(self: CreateSession, *args: Any) -> Any:
        new = original(self, *args)
        # A row the table's CHECK refuses: a bug of payorch's, as any refused statement would be.
        refused = dataclasses.replace(new, draft=dataclasses.replace(new.draft, shipping_minor=-1))
        return refused if self.idempotency_key == "refused" else new

    monkeypatch.setattr(CreateSession, "new_session", refused_for_one_key)
    keys = ["refused", *(f"fine-{number}" for number in range(7))]
    answers: dict[str, Any] = {}

    async def create(key: str) -> None:
        answers[key] = await create_session(client, shop, key)

    async with trio.open_nursery() as nursery:
        for key in keys:
            nursery.start_soon(create, key)
    assert answers["refused"].status_code == 500
    assert (await answers["refused"].get_json())["requestId"]
    for key in keys[1:]:
        assert answers[key].status_code == 201, key
        created = await answers[key].get_json()
        read = await client.get(f"/api/v1/sessions/{created['sessionId']}", headers=shop.headers)
        assert read.status_code == 200
