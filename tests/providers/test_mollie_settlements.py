"""What Mollie settled, as reconciliation reads it (`providers.mollie.settlements`): settlements (Mollie's
payouts) and their payments, refunds, chargebacks and costs, through the SDK against the fake Mollie,
page by page, with the organization access token an account may be linked with besides its key."""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, date, datetime
from typing import Any

import httpx
import pytest

from payorch.config import Settings
from payorch.providers.base import Credentials, ProviderError
from payorch.providers.mollie import MollieProvider
from payorch.providers.mollie.settlements import OrganizationTokenMissing
from payorch.providers.settlements import ListsPayoutItems, ReportsSettlements, SettledItem, SettledKind
from payorch.runtime import Runtime
from payorch.storage import provider_configs
from payorch.storage.database import Database
from tests import fake_mollie as mollie_fake
from tests.fake_mollie import FakeMollie, ScriptedFailure
from tests.helpers import Client, Shop, new_api_key, new_application, new_merchant
from tests.providers.api_support import created
from tests.providers.mollie_support import MOLLIE_KEY, PUBLIC_BASE_URL, mollie_settings, payment_of
from tests.providers.test_stripe_settlements import fetched

fake_mollie = mollie_fake.fake_mollie
TOKEN = "access_shopOrganization0123456789"
WITH_TOKEN = Credentials(
    json.dumps({"apiKey": MOLLIE_KEY, "organizationToken": TOKEN}, separators=(",", ":"))
)


@pytest.fixture
def mollie(fake_mollie: FakeMollie) -> MollieProvider:
    fake_mollie.accept_organization_token(TOKEN, fake_mollie.accept_key(MOLLIE_KEY))
    return MollieProvider(public_base_url=PUBLIC_BASE_URL, api_base=fake_mollie.url, timeout_s=5)


def _today() -> date:
    return datetime.now(UTC).date()


def _paid_payment(fake: FakeMollie, value: str = "10.00", method: str = "creditcard") -> str:
    """A payment created on the account through Mollie's API and paid."""
    status, answer, _ = fake.serve(
        "POST",
        "/v2/payments",
        {},
        {"authorization": f"Bearer {MOLLIE_KEY}"},
        json.dumps(
            {
                "amount": {"currency": "EUR", "value": value},
                "description": "Order",
                "redirectUrl": "https://shop.example/back",
                "method": method,
            }
        ).encode(),
    )
    assert status == 201, answer
    fake.pay(answer["id"])
    payment_id: str = answer["id"]
    return payment_id


def _refunded(fake: FakeMollie, payment_id: str, value: str) -> str:
    status, answer, _ = fake.serve(
        "POST",
        f"/v2/payments/{payment_id}/refunds",
        {},
        {"authorization": f"Bearer {MOLLIE_KEY}"},
        json.dumps({"amount": {"currency": "EUR", "value": value}}).encode(),
    )
    assert status == 201, answer
    refund_id: str = answer["id"]
    return refund_id


async def _items(mollie: MollieProvider, credentials: Credentials = WITH_TOKEN) -> list[SettledItem]:
    return [item async for item in mollie.settled_items(credentials, _today(), _today())]


async def test_mollie_reports_settlements_and_payout_items(mollie: MollieProvider) -> None:
    assert isinstance(mollie, ReportsSettlements)
    assert isinstance(mollie, ListsPayoutItems)
    assert mollie.settlement_lag_days == 2


async def test_every_item_of_a_settlement_is_read_through_many_pages(
    mollie: MollieProvider, fake_mollie: FakeMollie
) -> None:
    payments = [_paid_payment(fake_mollie, f"{10 + n}.00") for n in range(260)]
    refund = _refunded(fake_mollie, payments[0], "4.00")
    chargeback = fake_mollie.chargeback(payments[1])["id"]
    settlement = fake_mollie.settle(MOLLIE_KEY, payments, [refund], [chargeback])

    items = await _items(mollie)

    pages = fake_mollie.requests_to("GET", f"/v2/settlements/{settlement['id']}/payments")
    assert [page.query.get("from") for page in pages] == [None, payments[9]]  # newest first
    assert all(page.headers["authorization"] == f"Bearer {TOKEN}" for page in fake_mollie.requests[-5:])
    by_kind: dict[SettledKind, list[SettledItem]] = {}
    for item in items:
        by_kind.setdefault(item.kind, []).append(item)
    assert {item.payment_reference for item in by_kind[SettledKind.PAYMENT]} == set(payments)
    first = next(item for item in by_kind[SettledKind.PAYMENT] if item.payment_reference == payments[0])
    assert (first.currency, first.gross_minor, first.fee_minor, first.net_minor) == ("EUR", 1000, 0, 1000)
    assert (first.method, first.payout_id, first.settled_on) == ("card", settlement["id"], _today())
    (refunded,) = by_kind[SettledKind.REFUND]
    assert (refunded.item_id, refunded.refund_reference, refunded.payment_reference) == (
        refund,
        refund,
        payments[0],
    )
    assert refunded.gross_minor == refunded.net_minor == -400
    (charged_back,) = by_kind[SettledKind.CHARGEBACK]
    assert (charged_back.item_id, charged_back.payment_reference, charged_back.gross_minor) == (
        chargeback,
        payments[1],
        -1100,
    )
    (costs,) = by_kind[SettledKind.FEE]
    assert costs.method == "card"
    assert costs.gross_minor == -sum(fake_mollie.fee_of(1000 + 100 * n) for n in range(260))


async def test_settlements_are_payouts_read_through_many_pages(
    mollie: MollieProvider, fake_mollie: FakeMollie
) -> None:
    settled = [fake_mollie.settle(MOLLIE_KEY, [_paid_payment(fake_mollie)]) for _ in range(255)]
    fake_mollie.settle(MOLLIE_KEY, [_paid_payment(fake_mollie)], status="open")  # not paid out yet

    payouts = [payout async for payout in mollie.payouts(WITH_TOKEN, _today(), _today())]

    assert [p.payout_id for p in payouts] == [s["id"] for s in reversed(settled)]
    assert len(fake_mollie.requests_to("GET", "/v2/settlements")) == 2
    assert {(p.currency, p.amount_minor, p.status) for p in payouts} == {
        ("EUR", 1000 - fake_mollie.fee_of(1000), "paidout")
    }


async def test_a_settlement_is_read_with_its_items_whether_or_not_they_add_up(
    mollie: MollieProvider, fake_mollie: FakeMollie
) -> None:
    adds_up = fake_mollie.settle(MOLLIE_KEY, [_paid_payment(fake_mollie, "20.00") for _ in range(3)])
    short = fake_mollie.settle(MOLLIE_KEY, [_paid_payment(fake_mollie, "70.00")], amount_minor=6000)

    payouts = {p.payout_id: p async for p in mollie.payouts(WITH_TOKEN, _today(), _today())}

    for settlement, adding_up in ((adds_up, True), (short, False)):
        payout = payouts[settlement["id"]]
        carried = [item async for item in mollie.payout_items(WITH_TOKEN, payout)]
        assert {item.payout_id for item in carried} == {payout.payout_id}
        assert (sum(item.net_minor for item in carried) == payout.amount_minor) is adding_up
    assert payouts[short["id"]].amount_minor == 6000


@pytest.mark.parametrize("failure", [429, 503], ids=["rate_limited", "unavailable"])
async def test_a_failure_mid_stream_raises_provider_error(
    mollie: MollieProvider, fake_mollie: FakeMollie, failure: int
) -> None:
    settlement = fake_mollie.settle(MOLLIE_KEY, [_paid_payment(fake_mollie) for _ in range(300)])
    read: list[SettledItem] = []
    with pytest.raises(ProviderError, match=str(failure)):
        async for item in mollie.settled_items(WITH_TOKEN, _today(), _today()):
            if not read:  # the first page is in: the next one fails
                fake_mollie.fail_next(
                    "GET", f"/v2/settlements/{settlement['id']}/payments", ScriptedFailure(failure)
                )
            read.append(item)
    assert len(read) == 250


async def test_without_an_organization_token_reading_settlements_is_a_clear_error(
    mollie: MollieProvider, fake_mollie: FakeMollie
) -> None:
    fake_mollie.settle(MOLLIE_KEY, [_paid_payment(fake_mollie)])
    with pytest.raises(OrganizationTokenMissing, match="organization access token"):
        await _items(mollie, Credentials(MOLLIE_KEY))
    assert isinstance(OrganizationTokenMissing(), ProviderError)
    assert not [r for r in fake_mollie.requests if r.path.startswith("/v2/settlements")]


# --- Linking with the token, end to end --------------------------------------------------------------


@pytest.fixture
def settings(settings: Settings, fake_mollie: FakeMollie) -> Settings:
    fake_mollie.accept_organization_token(TOKEN, fake_mollie.accept_key(MOLLIE_KEY))
    return mollie_settings(settings, fake_mollie)


@pytest.fixture
async def mollie_caller(runtime: Runtime) -> AsyncIterator[httpx.AsyncClient]:
    transport = httpx.ASGITransport(app=runtime.app)  # type: ignore[arg-type]  # ASGI typing differs
    async with httpx.AsyncClient(transport=transport) as client:
        yield client


async def _link(client: Client, merchant: Any, application_id: str, credentials: dict[str, str]) -> Any:
    return await client.post(
        f"/api/v1/applications/{application_id}/providers",
        json={"name": "mollie", "paymentMethods": ["card"], "credentials": credentials},
        headers=merchant.headers,
    )


async def test_a_paid_session_is_the_settled_payment_of_the_account_linked_with_its_token(
    client: Client,
    db: Database,
    settings: Settings,
    runtime: Runtime,
    fake_mollie: FakeMollie,
    mollie_caller: httpx.AsyncClient,
) -> None:
    merchant = await new_merchant(client, db, settings)
    application = await new_application(client, merchant)
    linked = await _link(
        client, merchant, application["id"], {"apiKey": MOLLIE_KEY, "organizationToken": TOKEN}
    )
    assert linked.status_code == 201, await linked.get_data(as_text=True)
    assert (await linked.get_json())["keyFingerprint"] == f"{MOLLIE_KEY[:8]}...{MOLLIE_KEY[-4:]}"
    key = await new_api_key(client, merchant, application["id"])
    shop = Shop(merchant=merchant, application_id=application["id"], api_key=key["key"])
    session = await created(client, shop)
    payment_id = payment_of(fake_mollie, session["sessionId"])
    fake_mollie.pay(payment_id)
    assert (await fake_mollie.call_webhook(payment_id, via=mollie_caller)).json()["applied"] is True
    fake_mollie.settle(MOLLIE_KEY, [payment_id])

    config = await db.autocommit(provider_configs.get_provider_config, uuid.UUID(application["id"]), "mollie")
    assert config is not None
    context = runtime.services.context
    provider = context.providers.get("mollie")
    assert isinstance(provider, MollieProvider)
    items = [item async for item in provider.settled_items(context.credentials(config), _today(), _today())]
    (paid,) = [item for item in items if item.kind is SettledKind.PAYMENT]
    stored = await fetched(
        db, "SELECT provider_reference FROM checkout_sessions WHERE id = $1", uuid.UUID(session["sessionId"])
    )
    assert paid.payment_reference == payment_id == stored


@pytest.mark.parametrize(
    ("token", "said"),
    [
        ("org_x", "Mollie organization access tokens start with access_"),
        ("access_revoked123", "Mollie answered 401 for the organization access token"),
    ],
    ids=["not_of_mollies_form", "rejected_by_mollie"],
)
async def test_a_token_that_is_not_mollies_is_400_naming_it_and_links_nothing(
    client: Client, db: Database, settings: Settings, fake_mollie: FakeMollie, token: str, said: str
) -> None:
    merchant = await new_merchant(client, db, settings)
    application = await new_application(client, merchant)
    response = await _link(
        client, merchant, application["id"], {"apiKey": MOLLIE_KEY, "organizationToken": token}
    )
    assert response.status_code == 400
    body = await response.get_json()
    assert said in body["message"] and token not in json.dumps(body)
    assert [d["field"] for d in body["details"]] == ["credentials.organizationToken"]
    listed = await client.get(f"/api/v1/applications/{application['id']}/providers", headers=merchant.headers)
    assert (await listed.get_json())["items"] == []


async def test_an_account_linked_without_a_token_gets_one_by_replacing_its_credentials(
    client: Client, db: Database, settings: Settings, runtime: Runtime, fake_mollie: FakeMollie
) -> None:
    merchant = await new_merchant(client, db, settings)
    application = await new_application(client, merchant)
    assert (await _link(client, merchant, application["id"], {"apiKey": MOLLIE_KEY})).status_code == 201
    context = runtime.services.context
    provider = context.providers.get("mollie")
    assert isinstance(provider, MollieProvider)

    async def stored() -> Credentials:
        config = await db.autocommit(
            provider_configs.get_provider_config, uuid.UUID(application["id"]), "mollie"
        )
        assert config is not None
        return context.credentials(config)

    assert await stored() == Credentials(MOLLIE_KEY)  # a key alone is stored as it always was
    with pytest.raises(OrganizationTokenMissing):
        await _items(provider, await stored())
    replaced = await client.patch(
        f"/api/v1/applications/{application['id']}/providers/mollie/api-key",
        json={"apiKey": MOLLIE_KEY, "organizationToken": TOKEN},
        headers=merchant.headers,
    )
    assert replaced.status_code == 200, await replaced.get_data(as_text=True)
    fake_mollie.settle(MOLLIE_KEY, [_paid_payment(fake_mollie)])
    (payment, costs) = await _items(provider, await stored())
    assert (payment.kind, costs.kind) == (SettledKind.PAYMENT, SettledKind.FEE)
