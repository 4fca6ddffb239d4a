"""The way back from Stripe Checkout goes through payorch: Checkout keeps the customer on its page
after a decline and returns through the cancel URL when they give up; payorch then reads the
Checkout Session and its PaymentIntent's last decline from Stripe (its fake at the HTTP boundary)
and, under the application's recovery policy, opens the next attempt at the sandbox. A session
completed by a delayed payment still processing ends recovery on payorch's result page."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest

from payorch.config import Settings
from payorch.storage.database import Database
from tests import fake_stripe as stripe_fake
from tests.fake_stripe import FakeStripe
from tests.helpers import Client, Shop
from tests.providers.api_support import record as _record
from tests.providers.test_merchant_routing import _shop, settings, stripe_sender  # noqa: F401
from tests.providers.way_back_support import (
    FAILURE,
    SUCCESS,
    assert_recovered_at_the_sandbox,
    come_back,
    session_first_at,
)

# The Stripe SDK's HTTPXClient hands httpx the encoded form as `data=`, which httpx deprecates.
pytestmark = pytest.mark.filterwarnings("ignore:Use 'content=<...>':DeprecationWarning")
fake_stripe = stripe_fake.fake_stripe

PAYING_CARD = "4242424242424242"


@pytest.fixture
async def shop(client: Client, db: Database, settings: Settings, fake_stripe: FakeStripe) -> Shop:  # noqa: F811
    return await _shop(client, db, settings, stripe_methods=("card",))


def _checkout(fake: FakeStripe, session_id: str) -> dict[str, Any]:
    """The Checkout Session payorch created for the session."""
    (found,) = [
        r.answer
        for r in fake.requests_to("POST", "/v1/checkout/sessions")
        if r.status == 200 and r.answer["client_reference_id"] == session_id
    ]
    return found


async def test_a_declined_customer_who_gives_up_at_stripe_goes_on_to_the_next_attempt(
    client: Client, shop: Shop, fake_stripe: FakeStripe
) -> None:
    created = await session_first_at(client, shop, "stripe", {"maxAttempts": 2})
    checkout = _checkout(fake_stripe, created["sessionId"])
    fake_stripe.decline(checkout["id"], "insufficient_funds")

    sent_on = await come_back(client, checkout["cancel_url"])

    await assert_recovered_at_the_sandbox(
        client,
        shop,
        created["sessionId"],
        sent_on,
        ("stripe", "DECLINED", "INSUFFICIENT_FUNDS", "insufficient_funds"),
    )
    # Closed at Stripe before the next attempt opened: nobody can pay it any more.
    assert fake_stripe.checkout(checkout["id"])["status"] == "expired"

    paid = await client.post(urlsplit(sent_on).path, form={"card_number": PAYING_CARD})
    assert paid.status_code == 303
    assert await come_back(client, paid.headers["Location"]) == SUCCESS


async def test_a_hard_decline_at_stripe_goes_to_the_failure_url(
    client: Client, shop: Shop, fake_stripe: FakeStripe
) -> None:
    created = await session_first_at(client, shop, "stripe", {"maxAttempts": 2})
    checkout = _checkout(fake_stripe, created["sessionId"])
    fake_stripe.decline(checkout["id"], "lost_card")
    assert await come_back(client, checkout["cancel_url"]) == FAILURE
    record = await _record(client, shop, created["sessionId"])
    assert (record["status"], record["providerName"], len(record["attempts"])) == ("PENDING", "stripe", 1)
    assert fake_stripe.checkout(checkout["id"])["status"] == "open"


async def test_a_cancel_without_a_decline_goes_to_the_failure_url(
    client: Client, shop: Shop, fake_stripe: FakeStripe
) -> None:
    created = await session_first_at(client, shop, "stripe", {"maxAttempts": 2})
    checkout = _checkout(fake_stripe, created["sessionId"])
    assert await come_back(client, checkout["cancel_url"]) == FAILURE
    record = await _record(client, shop, created["sessionId"])
    assert (record["status"], len(record["attempts"])) == ("PENDING", 1)


async def test_without_a_recovery_policy_a_declined_cancel_goes_to_the_failure_url(
    client: Client, shop: Shop, fake_stripe: FakeStripe
) -> None:
    created = await session_first_at(client, shop, "stripe")
    checkout = _checkout(fake_stripe, created["sessionId"])
    fake_stripe.decline(checkout["id"], "generic_decline")
    assert await come_back(client, checkout["cancel_url"]) == FAILURE
    assert len((await _record(client, shop, created["sessionId"]))["attempts"]) == 1


async def test_a_paid_checkouts_return_goes_on_to_the_success_url_before_stripes_event(
    client: Client, shop: Shop, fake_stripe: FakeStripe
) -> None:
    created = await session_first_at(client, shop, "stripe", {"maxAttempts": 2})
    checkout = _checkout(fake_stripe, created["sessionId"])
    fake_stripe.decline(checkout["id"])
    fake_stripe.pay(checkout["id"])  # the customer tried again on Checkout's page, and paid
    assert await come_back(client, checkout["success_url"]) == SUCCESS
    assert len((await _record(client, shop, created["sessionId"]))["attempts"]) == 1


async def test_without_redirect_urls_the_way_back_ends_on_payorchs_result_page(
    client: Client, shop: Shop, fake_stripe: FakeStripe
) -> None:
    created = await session_first_at(client, shop, "stripe", redirectUrls=None)
    checkout = _checkout(fake_stripe, created["sessionId"])
    fake_stripe.pay(checkout["id"])
    assert urlsplit(await come_back(client, checkout["success_url"])).path == (
        f"/checkout/{created['sessionId']}/result"
    )


async def test_a_delayed_payment_still_processing_ends_recovery_on_payorchs_result_page(
    client: Client,
    shop: Shop,
    fake_stripe: FakeStripe,
    stripe_sender: httpx.AsyncClient,  # noqa: F811
) -> None:
    created = await session_first_at(client, shop, "stripe", {"maxAttempts": 2})
    session_id = created["sessionId"]
    checkout = _checkout(fake_stripe, session_id)
    fake_stripe.decline(checkout["id"], "insufficient_funds")  # a card first, then a bank debit
    completed = fake_stripe.complete_delayed(checkout["id"])

    where = await come_back(client, checkout["success_url"])

    assert urlsplit(where).path == f"/checkout/{session_id}/result"
    record = await _record(client, shop, session_id)
    assert (record["status"], record["providerName"], len(record["attempts"])) == ("PENDING", "stripe", 1)
    assert fake_stripe.requests_to("POST", f"/v1/checkout/sessions/{checkout['id']}/expire") == []
    assert len(fake_stripe.requests_to("POST", "/v1/checkout/sessions")) == 1  # no next checkout
    page = await (await client.get(urlsplit(where).path)).get_data(as_text=True)
    assert "Confirming your payment" in page

    for event in (completed, fake_stripe.pay_delayed(checkout["id"])):
        (answer,) = await fake_stripe.deliver(event, via=stripe_sender)
        assert answer.status_code == 200
    record = await _record(client, shop, session_id)
    assert (record["status"], [a["status"] for a in record["attempts"]]) == ("SUCCEEDED", ["SUCCEEDED"])
