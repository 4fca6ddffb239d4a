"""Routing between PayU and Mollie, both linked, each at its fake on loopback: the dynamic route
ranks them on evidence, the merchant's rule sends BLIK to PayU, and PayU refusing the shop's
credentials at creation cascades to Mollie."""

from __future__ import annotations

import pytest
import trio

from payorch.config import Settings
from payorch.runtime import Runtime
from payorch.storage.database import Database
from tests import fake_mollie as mollie_fake
from tests import fake_payu as payu_fake
from tests.fake_mollie import FakeMollie
from tests.fake_payu import ORDERS, FakePayu
from tests.helpers import Client, Shop, put_routing
from tests.providers.api_support import created, health_account, record
from tests.providers.mollie_support import MOLLIE_KEY, link
from tests.providers.payu_support import CLIENT_SECRET, POS_ID, SECOND_KEY, new_payu_shop, payu_settings

fake_mollie = mollie_fake.fake_mollie
fake_payu = payu_fake.fake_payu


@pytest.fixture
def settings(settings: Settings, fake_payu: FakePayu, fake_mollie: FakeMollie) -> Settings:
    fake_payu.accept_pos(POS_ID, POS_ID, CLIENT_SECRET, SECOND_KEY)
    fake_mollie.accept_key(MOLLIE_KEY)
    return payu_settings(settings, fake_payu, mollie_api_base=fake_mollie.url)


@pytest.fixture
async def shop(client: Client, db: Database, settings: Settings) -> Shop:
    """A merchant's application linked to PayU and Mollie."""
    shop = await new_payu_shop(client, db, settings)
    linked = await link(client, shop.merchant, shop.application_id, methods=("blik", "card"))
    assert linked.status_code == 201, await linked.get_data(as_text=True)
    return shop


def _payu_orders(fake: FakePayu) -> list[int]:
    return [r.status for r in fake.requests_to("POST", ORDERS)]


def _mollie_payments(fake: FakeMollie) -> list[int]:
    return [r.status for r in fake.requests_to("POST", "/v2/payments")]


async def test_the_dynamic_route_ranks_payu_and_mollie_on_evidence_and_a_rule_sends_blik_to_payu(
    client: Client, db: Database, shop: Shop, runtime: Runtime, fake_payu: FakePayu, fake_mollie: FakeMollie
) -> None:
    # No document: the default dynamic route, and before any outcome both rank equal, by name.
    first = await created(client, shop, "first", method="blik")
    assert (first["routing"]["selectedProvider"], first["routing"]["reason"]) == ("mollie", "dynamic")
    # A failed creation at Mollie weighs on its score: the dynamic route now ranks PayU first.
    mollie = await health_account(db, shop, "mollie")
    runtime.services.context.health.record_failure(mollie, 0.1, trio.current_time(), provider_wide=False)
    second = await created(client, shop, "second", method="blik")
    assert (second["routing"]["selectedProvider"], second["routing"]["reason"]) == ("payu", "dynamic")
    await put_routing(
        client,
        shop,
        {
            "rules": [
                {
                    "name": "blik-payu",
                    "when": {"paymentMethods": ["blik"]},
                    "route": {"type": "priority", "providers": ["payu", "mollie"]},
                }
            ],
            "default": {"type": "priority", "providers": ["mollie", "payu"]},
        },
    )
    third = await created(client, shop, "third", method="blik")
    assert (third["routing"]["selectedProvider"], third["routing"]["rule"]) == ("payu", "blik-payu")
    card = await created(client, shop, "card", method="card")
    assert card["routing"]["selectedProvider"] == "mollie"
    assert (_payu_orders(fake_payu), _mollie_payments(fake_mollie)) == ([302, 302], [201, 201])
    assert (await record(client, shop, third["sessionId"]))["providerName"] == "payu"


async def test_payu_refusing_the_shops_credentials_at_creation_cascades_to_mollie(
    client: Client, shop: Shop, fake_payu: FakePayu, fake_mollie: FakeMollie
) -> None:
    await put_routing(client, shop, {"default": {"type": "priority", "providers": ["payu", "mollie"]}})
    fake_payu.revoke_pos(POS_ID)
    session = await created(client, shop, method="blik")
    assert (session["routing"]["selectedProvider"], session["routing"]["reason"]) == ("mollie", "cascade")
    assert _payu_orders(fake_payu) == [401]
    assert _mollie_payments(fake_mollie) == [201]
