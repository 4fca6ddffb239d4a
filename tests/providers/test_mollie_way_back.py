"""The way back from Mollie's checkout goes through payorch: Mollie sends the customer back after any
final status; payorch then reads the payment (its status, a card payment's `details.failureReason`,
translated to payorch's reason) from Mollie (its fake at the HTTP boundary) and, under the
application's recovery policy, opens the next attempt at the sandbox. A payment Mollie says may
still be paid (`open`, `pending`) ends recovery on payorch's result page."""

from __future__ import annotations

from collections.abc import AsyncIterator
from urllib.parse import urlsplit

import httpx
import pytest

from payorch.config import Settings
from payorch.runtime import Runtime
from payorch.storage.database import Database
from tests import fake_mollie as mollie_fake
from tests.fake_mollie import FakeMollie
from tests.helpers import Client, Shop, link_sandbox
from tests.providers.api_support import record as _record
from tests.providers.mollie_support import MOLLIE_KEY, mollie_settings, new_linked_shop, payment_of
from tests.providers.way_back_support import (
    FAILURE,
    SUCCESS,
    assert_recovered_at_the_sandbox,
    come_back,
    session_first_at,
)

fake_mollie = mollie_fake.fake_mollie


@pytest.fixture
def settings(settings: Settings, fake_mollie: FakeMollie) -> Settings:
    fake_mollie.accept_key(MOLLIE_KEY)
    return mollie_settings(settings, fake_mollie)


@pytest.fixture
async def shop(client: Client, db: Database, settings: Settings) -> Shop:
    """A merchant's application linked to Mollie and to the sandbox."""
    shop = await new_linked_shop(client, db, settings, ("mollie", MOLLIE_KEY))
    await link_sandbox(client, shop.merchant, shop.application_id)
    return shop


@pytest.fixture
async def mollie_caller(runtime: Runtime) -> AsyncIterator[httpx.AsyncClient]:
    """How the fake Mollie reaches payorch's provider-events route: HTTP into the app itself."""
    transport = httpx.ASGITransport(app=runtime.app)  # type: ignore[arg-type]  # ASGI typing differs
    async with httpx.AsyncClient(transport=transport) as client:
        yield client


async def _come_back(client: Client, fake: FakeMollie, payment_id: str) -> str:
    """The customer follows the payment's `redirectUrl`, as Mollie sends them after a final status."""
    return await come_back(client, fake.payment(payment_id)["redirectUrl"])


async def test_insufficient_funds_at_mollie_keeps_its_reason_and_goes_on_to_the_next_attempt(
    client: Client, shop: Shop, fake_mollie: FakeMollie
) -> None:
    recovery = {"maxAttempts": 2, "retryOn": ["INSUFFICIENT_FUNDS"]}  # retried for this reason only
    created = await session_first_at(client, shop, "mollie", recovery)
    payment_id = payment_of(fake_mollie, created["sessionId"])
    fake_mollie.fail(payment_id, failure_reason="insufficient_funds")

    sent_on = await _come_back(client, fake_mollie, payment_id)

    await assert_recovered_at_the_sandbox(
        client,
        shop,
        created["sessionId"],
        sent_on,
        ("mollie", "DECLINED", "INSUFFICIENT_FUNDS", "insufficient_funds"),
    )


async def test_a_failure_without_a_reason_is_a_decline_coded_failed(
    client: Client, shop: Shop, fake_mollie: FakeMollie
) -> None:
    created = await session_first_at(client, shop, "mollie", {"maxAttempts": 2})
    payment_id = payment_of(fake_mollie, created["sessionId"])
    fake_mollie.fail(payment_id)
    sent_on = await _come_back(client, fake_mollie, payment_id)
    await assert_recovered_at_the_sandbox(
        client, shop, created["sessionId"], sent_on, ("mollie", "DECLINED", "PAYMENT_FAILED", "failed")
    )


async def test_possible_fraud_at_mollie_is_never_retried_whatever_the_policy(
    client: Client, shop: Shop, fake_mollie: FakeMollie
) -> None:
    every_reason = ["CARD_DECLINED", "INSUFFICIENT_FUNDS", "EXPIRED_OR_CANCELED_CARD", "PAYMENT_FAILED"]
    created = await session_first_at(client, shop, "mollie", {"maxAttempts": 3, "retryOn": every_reason})
    payment_id = payment_of(fake_mollie, created["sessionId"])
    fake_mollie.fail(payment_id, failure_reason="possible_fraud")
    assert await _come_back(client, fake_mollie, payment_id) == FAILURE
    record = await _record(client, shop, created["sessionId"])
    assert (record["status"], record["providerName"], len(record["attempts"])) == ("PENDING", "mollie", 1)


async def test_a_payment_the_customer_canceled_goes_to_the_failure_url(
    client: Client, shop: Shop, fake_mollie: FakeMollie
) -> None:
    created = await session_first_at(client, shop, "mollie", {"maxAttempts": 2})
    payment_id = payment_of(fake_mollie, created["sessionId"])
    fake_mollie.cancel(payment_id)
    assert await _come_back(client, fake_mollie, payment_id) == FAILURE
    assert len((await _record(client, shop, created["sessionId"]))["attempts"]) == 1


async def test_a_paid_payments_return_goes_on_to_the_success_url_before_mollies_webhook(
    client: Client, shop: Shop, fake_mollie: FakeMollie
) -> None:
    created = await session_first_at(client, shop, "mollie", {"maxAttempts": 2})
    payment_id = payment_of(fake_mollie, created["sessionId"])
    fake_mollie.pay(payment_id)
    assert await _come_back(client, fake_mollie, payment_id) == SUCCESS
    assert len((await _record(client, shop, created["sessionId"]))["attempts"]) == 1


async def _ends_on_the_result_page(client: Client, shop: Shop, fake: FakeMollie, payment_id: str) -> None:
    """The customer, back from the payment, goes to payorch's result page, which says the payment is
    being confirmed; the session stays PENDING at Mollie, no next attempt opened."""
    session_id = fake.payment(payment_id)["metadata"]["payorch_session_id"]
    where = urlsplit(await _come_back(client, fake, payment_id))
    assert where.path == f"/checkout/{session_id}/result"
    record = await _record(client, shop, session_id)
    assert (record["status"], record["providerName"], len(record["attempts"])) == ("PENDING", "mollie", 1)
    assert len(fake.requests_to("POST", "/v2/payments")) == 1  # no next checkout
    assert fake.requests_to("DELETE", f"/v2/payments/{payment_id}") == []  # not cancelled
    assert "Confirming your payment" in await (await client.get(where.path)).get_data(as_text=True)


async def test_a_payment_still_pending_ends_recovery_and_its_webhook_completes_the_session(
    client: Client, shop: Shop, fake_mollie: FakeMollie, mollie_caller: httpx.AsyncClient
) -> None:
    created = await session_first_at(client, shop, "mollie", {"maxAttempts": 2})
    payment_id = payment_of(fake_mollie, created["sessionId"])
    fake_mollie.start(payment_id)  # BLIK waiting for the customer's bank

    await _ends_on_the_result_page(client, shop, fake_mollie, payment_id)

    fake_mollie.pay(payment_id)  # the bank approved it
    answer = await fake_mollie.call_webhook(payment_id, via=mollie_caller)
    assert answer.json() == {"received": True, "applied": True}
    record = await _record(client, shop, created["sessionId"])
    assert (record["status"], [a["status"] for a in record["attempts"]]) == ("SUCCEEDED", ["SUCCEEDED"])


async def test_a_payment_still_open_ends_recovery_on_payorchs_result_page(
    client: Client, shop: Shop, fake_mollie: FakeMollie
) -> None:
    # Mollie says an open payment can still be completed by the customer (a bank transfer stays
    # open for days): it may still be paid, so no other attempt opens.
    created = await session_first_at(client, shop, "mollie", {"maxAttempts": 2})
    payment_id = payment_of(fake_mollie, created["sessionId"])
    await _ends_on_the_result_page(client, shop, fake_mollie, payment_id)
