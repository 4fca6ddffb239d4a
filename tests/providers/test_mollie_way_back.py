"""The way back from Mollie's checkout goes through payorch: Mollie sends the customer back after any
final status; payorch then reads the payment (its status, a card payment's `details.failureReason`)
from Mollie (its fake at the HTTP boundary) and, under the application's recovery policy, opens the
next attempt at the sandbox."""

from __future__ import annotations

from urllib.parse import urlsplit

import pytest

from payorch.config import Settings
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


async def _come_back(client: Client, fake: FakeMollie, payment_id: str) -> str:
    """The customer follows the payment's `redirectUrl`, as Mollie sends them after a final status."""
    return await come_back(client, fake.payment(payment_id)["redirectUrl"])


async def test_a_soft_card_failure_at_mollie_goes_on_to_the_next_attempt(
    client: Client, shop: Shop, fake_mollie: FakeMollie
) -> None:
    created = await session_first_at(client, shop, "mollie", {"maxAttempts": 2})
    payment_id = payment_of(fake_mollie, created["sessionId"])
    fake_mollie.fail(payment_id, failure_reason="insufficient_funds")

    sent_on = await _come_back(client, fake_mollie, payment_id)

    await assert_recovered_at_the_sandbox(
        client,
        shop,
        created["sessionId"],
        sent_on,
        ("mollie", "DECLINED", "PAYMENT_FAILED", "insufficient_funds"),
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


async def test_possible_fraud_at_mollie_goes_to_the_failure_url(
    client: Client, shop: Shop, fake_mollie: FakeMollie
) -> None:
    created = await session_first_at(client, shop, "mollie", {"maxAttempts": 2})
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


async def test_a_payment_still_pending_ends_recovery_on_payorchs_result_page(
    client: Client, shop: Shop, fake_mollie: FakeMollie
) -> None:
    created = await session_first_at(client, shop, "mollie", {"maxAttempts": 2})
    payment_id = payment_of(fake_mollie, created["sessionId"])
    fake_mollie.start(payment_id)
    assert urlsplit(await _come_back(client, fake_mollie, payment_id)).path == (
        f"/checkout/{created['sessionId']}/result"
    )
    record = await _record(client, shop, created["sessionId"])
    assert (record["status"], record["providerName"], len(record["attempts"])) == ("PENDING", "mollie", 1)
