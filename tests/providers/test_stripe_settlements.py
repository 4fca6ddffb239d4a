"""What Stripe settled, as reconciliation reads it (`providers.stripe.settlements`): balance
transactions and payouts through the SDK against the fake Stripe, page by page; and the PaymentIntent
id payorch keeps when a Stripe payment succeeds, by which a settled item names its payment."""

from __future__ import annotations

import uuid
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from typing import Any

import httpx
import pytest

from payorch.providers.base import Credentials, ProviderError
from payorch.providers.settlements import ListsPayoutItems, ReportsSettlements, SettledItem, SettledKind
from payorch.providers.stripe import StripeProvider
from payorch.storage.database import Connection, Database
from tests import fake_stripe as stripe_fake
from tests.fake_stripe import FakeStripe, ScriptedFailure
from tests.helpers import Client, Shop, eventually
from tests.providers.api_support import created as _created
from tests.providers.api_support import refund as _refund
from tests.providers.test_stripe import STRIPE_KEY, _paid, settings, shop, stripe_sender
from tests.providers.test_stripe_adapter import KEY, provider

pytestmark = pytest.mark.filterwarnings("ignore:Use 'content=<...>':DeprecationWarning")

fake_stripe = stripe_fake.fake_stripe
__all__ = ["provider", "settings", "shop", "stripe_sender"]  # fixtures
SHOP_KEY = Credentials(api_key=STRIPE_KEY)  # the end-to-end tests' account


def _today() -> date:
    return datetime.now(UTC).date()


async def _items(
    provider: StripeProvider, first: date, last: date, credentials: Credentials = KEY
) -> list[SettledItem]:
    return [item async for item in provider.settled_items(credentials, first, last)]


async def fetched(db: Database, query: str, *args: Any) -> Any:
    """The one value `query` reads from payorch's database."""

    async def read(conn: Connection) -> Any:
        return await conn.fetchval(query, *args)

    return await db.autocommit(read)


async def test_stripe_reports_settlements_and_payout_items(provider: StripeProvider) -> None:
    assert isinstance(provider, ReportsSettlements)
    assert isinstance(provider, ListsPayoutItems)
    assert provider.settlement_lag_days == 2


async def test_every_item_of_a_period_is_read_through_many_pages(
    provider: StripeProvider, fake_stripe: FakeStripe
) -> None:
    intents = [fake_stripe.charge(KEY.api_key, 1000 + n) for n in range(230)]
    fee = fake_stripe.add_transaction(KEY.api_key, "stripe_fee", -500, fee=0)
    settled_on = _today() + timedelta(days=2)

    items = await _items(provider, settled_on, settled_on)

    pages = fake_stripe.requests_to("GET", "/v1/balance_transactions")
    assert len(pages) == 3
    assert all(page.query["limit"] == "100" and page.query["expand"] == ["data.source"] for page in pages)
    assert [page.query.get("starting_after") for page in pages[1:]] == [
        pages[0].answer["data"][-1]["id"],
        pages[1].answer["data"][-1]["id"],
    ]
    assert len(items) == 230  # the fee is available today, not in this period
    by_reference = {item.payment_reference: item for item in items}
    assert set(by_reference) == {intent["id"] for intent in intents}
    first = by_reference[intents[0]["id"]]
    assert first.kind is SettledKind.PAYMENT
    assert (first.currency, first.gross_minor) == ("PLN", 1000)
    assert first.fee_minor == fake_stripe.fee_of(1000)
    assert first.net_minor == 1000 - fake_stripe.fee_of(1000)
    assert first.settled_on == settled_on and first.method == "card"
    assert first.item_id == fake_stripe.transaction_of(intents[0]["latest_charge"])["id"]
    assert first.refund_reference is None and first.payout_id is None
    (today_fee,) = await _items(provider, _today(), _today())
    assert (today_fee.item_id, today_fee.kind, today_fee.gross_minor) == (fee["id"], SettledKind.FEE, -500)


async def test_a_refund_is_a_negative_item_naming_its_refund_and_payment(
    provider: StripeProvider, fake_stripe: FakeStripe
) -> None:
    intent = fake_stripe.charge(KEY.api_key, 5000)
    refund = fake_stripe.serve(
        "POST",
        "/v1/refunds",
        {},
        {"authorization": f"Bearer {KEY.api_key}"},
        f"payment_intent={intent['id']}&amount=1200".encode(),
    )[1]
    (item,) = await _items(provider, _today(), _today())
    assert item.kind is SettledKind.REFUND
    assert (item.gross_minor, item.fee_minor, item.net_minor) == (-1200, 0, -1200)
    assert (item.refund_reference, item.payment_reference) == (refund["id"], intent["id"])


async def test_payouts_are_read_with_the_items_each_carried_whether_or_not_they_add_up(
    provider: StripeProvider, fake_stripe: FakeStripe
) -> None:
    first = [fake_stripe.charge(KEY.api_key, 2000) for _ in range(3)]
    adds_up = fake_stripe.pay_out(
        KEY.api_key, [fake_stripe.transaction_of(i["latest_charge"])["id"] for i in first]
    )
    second = fake_stripe.charge(KEY.api_key, 7000)
    short = fake_stripe.pay_out(
        KEY.api_key, [fake_stripe.transaction_of(second["latest_charge"])["id"]], amount=6000
    )
    arrives = _today() + timedelta(days=2)

    payouts = [payout async for payout in provider.payouts(KEY, arrives, arrives)]

    assert {p.payout_id: p.amount_minor for p in payouts} == {
        adds_up["id"]: 3 * (2000 - fake_stripe.fee_of(2000)),
        short["id"]: 6000,
    }
    assert all(p.currency == "PLN" and p.arrives_on == arrives and p.status == "paid" for p in payouts)
    by_id = {p.payout_id: p for p in payouts}
    carried = [item async for item in provider.payout_items(KEY, by_id[adds_up["id"]])]
    assert {item.payment_reference for item in carried} == {i["id"] for i in first}
    assert sum(item.net_minor for item in carried) == by_id[adds_up["id"]].amount_minor
    assert {item.payout_id for item in carried} == {adds_up["id"]}
    (alone,) = [item async for item in provider.payout_items(KEY, by_id[short["id"]])]
    assert alone.net_minor == 7000 - fake_stripe.fee_of(7000) != by_id[short["id"]].amount_minor
    assert fake_stripe.requests_to("GET", "/v1/balance_transactions")[-1].query["payout"] == short["id"]


@pytest.mark.parametrize("failure", [429, 503], ids=["rate_limited", "unavailable"])
async def test_a_failure_mid_stream_raises_provider_error(
    provider: StripeProvider, fake_stripe: FakeStripe, failure: int
) -> None:
    for n in range(150):
        fake_stripe.charge(KEY.api_key, 1000 + n)
    settled_on = _today() + timedelta(days=2)
    read: list[SettledItem] = []
    with pytest.raises(ProviderError, match=str(failure)):
        async for item in provider.settled_items(KEY, settled_on, settled_on):
            if not read:  # the first page is in: every later try of the next one fails
                failing = ScriptedFailure(
                    failure, body={"error": {"type": "api_error", "message": "Try again later."}}
                )
                fake_stripe.fail_next("GET", "/v1/balance_transactions", *[failing] * 4)
            read.append(item)
    assert len(read) == 100


# --- End to end: the PaymentIntent payorch keeps ---------------------------------------------------


async def _payment_reference(db: Database, session_id: str) -> Any:
    return await fetched(
        db, "SELECT provider_payment_reference FROM checkout_sessions WHERE id = $1", uuid.UUID(session_id)
    )


async def test_a_paid_stripe_session_keeps_its_payment_intent_which_its_settled_item_names(
    client: Client,
    db: Database,
    shop: Shop,
    fake_stripe: FakeStripe,
    stripe_sender: httpx.AsyncClient,
    provider: StripeProvider,
) -> None:
    session_id, payment_intent = await _paid(client, shop, fake_stripe, stripe_sender)
    assert await _payment_reference(db, session_id) == payment_intent

    settled_on = _today() + timedelta(days=2)
    (item,) = await _items(provider, settled_on, settled_on, SHOP_KEY)
    assert (item.kind, item.payment_reference) == (SettledKind.PAYMENT, payment_intent)


async def test_a_delayed_stripe_payment_keeps_its_payment_intent_when_it_succeeds(
    client: Client, db: Database, shop: Shop, fake_stripe: FakeStripe, stripe_sender: httpx.AsyncClient
) -> None:
    created = await _created(client, shop)
    (sent,) = fake_stripe.requests_to("POST", "/v1/checkout/sessions")
    checkout_id = sent.answer["id"]
    await fake_stripe.deliver(fake_stripe.complete_delayed(checkout_id), via=stripe_sender)
    assert await _payment_reference(db, created["sessionId"]) is None  # not paid yet
    await fake_stripe.deliver(fake_stripe.pay_delayed(checkout_id), via=stripe_sender)
    assert (
        await _payment_reference(db, created["sessionId"])
        == fake_stripe.checkout(checkout_id)["payment_intent"]
    )


async def test_a_stripe_refunds_item_names_the_refund_as_payorch_stores_it(
    client: Client,
    db: Database,
    shop: Shop,
    fake_stripe: FakeStripe,
    stripe_sender: httpx.AsyncClient,
    provider: StripeProvider,
) -> None:
    session_id, payment_intent = await _paid(client, shop, fake_stripe, stripe_sender)
    response = await _refund(client, shop, session_id, "r1", amount=Decimal("10.00"))
    assert response.status_code in (201, 202), await response.get_data(as_text=True)

    async def stored() -> str | None:
        found: str | None = await fetched(
            db, "SELECT provider_reference FROM refunds WHERE session_id = $1", uuid.UUID(session_id)
        )
        return found

    reference = await eventually(stored)
    (item,) = await _items(provider, _today(), _today(), SHOP_KEY)
    assert item.kind is SettledKind.REFUND
    assert (item.refund_reference, item.payment_reference) == (reference, payment_intent)
