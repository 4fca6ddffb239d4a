"""What an unauthenticated caller of PayU's notification route can make payorch do: nothing without
the second key's signature, a few refund lookups per application at once (the rest answered 503
for PayU to send again), and one address posts notifications at a bounded rate."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest
import trio

from payorch.config import LimitSettings, Settings
from payorch.runtime import Runtime
from payorch.storage.database import Database
from tests import fake_payu as payu_fake
from tests.fake_payu import ORDERS, FakePayu
from tests.helpers import Client, Shop, eventually
from tests.providers.api_support import created, record, refund
from tests.providers.payu_support import (
    CLIENT_SECRET,
    POS_ID,
    PUBLIC_BASE_URL,
    SECOND_KEY,
    new_payu_shop,
    order_of,
    payu_settings,
)

fake_payu = payu_fake.fake_payu

LOOKUPS = 2
EVENTS_BURST = 5


@pytest.fixture
def settings(settings: Settings, fake_payu: FakePayu) -> Settings:
    fake_payu.accept_pos(POS_ID, POS_ID, CLIENT_SECRET, SECOND_KEY)
    limits = LimitSettings(
        provider_events_per_address_per_second=0.01,
        provider_events_per_address_burst=EVENTS_BURST,
        provider_event_lookups_per_application=LOOKUPS,
    )
    return payu_settings(settings, fake_payu).model_copy(update={"limits": limits})


def _caller(runtime: Runtime, address: str) -> httpx.AsyncClient:
    """HTTP into payorch's app from `address`."""
    transport = httpx.ASGITransport(app=runtime.app, client=(address, 40000))  # type: ignore[arg-type]
    return httpx.AsyncClient(transport=transport)


@pytest.fixture
async def payu_caller(runtime: Runtime) -> AsyncIterator[httpx.AsyncClient]:
    async with _caller(runtime, "185.68.12.10") as client:
        yield client


@pytest.fixture
async def shop(client: Client, db: Database, settings: Settings) -> Shop:
    return await new_payu_shop(client, db, settings)


async def test_one_address_posting_notifications_past_its_burst_is_429_while_payus_address_is_served(
    client: Client, shop: Shop, fake_payu: FakePayu, runtime: Runtime
) -> None:
    session = await created(client, shop, method="blik")
    order_id = order_of(fake_payu, session["sessionId"])["orderId"]
    url = f"{PUBLIC_BASE_URL}/api/v1/provider-events/payu/{shop.application_id}"
    async with _caller(runtime, "203.0.113.9") as stranger:
        for _ in range(EVENTS_BURST):
            forged = await stranger.post(
                url, content=b"{}", headers={"OpenPayu-Signature": "signature=0;algorithm=MD5"}
            )
            assert forged.status_code == 400
        asked = len(fake_payu.requests)
        refused = await stranger.post(url, content=b"{}")
        assert refused.status_code == 429
        assert int(refused.headers["Retry-After"]) >= 1
        assert len(fake_payu.requests) == asked
    fake_payu.pay(order_id)
    async with _caller(runtime, "185.68.12.11") as payu:
        answers = await fake_payu.deliver(payu)
    assert [a.json() for a in answers] == [
        {"received": True, "applied": False},
        {"received": True, "applied": True},
    ]


async def test_refund_lookups_past_the_applications_share_are_503_and_apply_when_payu_sends_again(
    client: Client, shop: Shop, fake_payu: FakePayu, payu_caller: httpx.AsyncClient, runtime: Runtime
) -> None:
    sessions = []
    for index in range(LOOKUPS + 1):
        session = await created(client, shop, f"k{index}", method="blik")
        fake_payu.pay(order_of(fake_payu, session["sessionId"])["orderId"])
        sessions.append(session["sessionId"])
    fake_payu.owed = [n for n in fake_payu.owed if b'"COMPLETED"' in n.body]  # within one burst
    async with _caller(runtime, "192.0.2.50") as payments:  # another of PayU's addresses
        await fake_payu.deliver(payments)
    for index, session_id in enumerate(sessions):
        assert (await refund(client, shop, session_id, f"r{index}")).status_code == 201
        order_id = order_of(fake_payu, session_id)["orderId"]
        sent = fake_payu.only("POST", f"{ORDERS}/{order_id}/refunds")
        fake_payu.finish_refund(order_id, sent.answer["refund"]["refundId"])
    owed, fake_payu.owed = fake_payu.owed, []
    fake_payu.refunds_read_delay_s = 1.0
    answers: list[httpx.Response] = []

    async def send(index: int) -> None:
        fake_payu.owed = [owed[index]]
        answers.extend(await fake_payu.deliver(payu_caller, tries=1))

    async with trio.open_nursery() as nursery:
        for index in range(LOOKUPS):
            nursery.start_soon(send, index)

        async def every_lookup_waits_on_payu() -> bool | None:
            reading = [r for r in fake_payu.requests if r.method == "GET" and r.path.endswith("/refunds")]
            return len(reading) == LOOKUPS or None

        await eventually(every_lookup_waits_on_payu)
        fake_payu.owed = [owed[LOOKUPS]]
        (shed,) = await fake_payu.deliver(payu_caller, tries=1)
        assert shed.status_code == 503
        assert shed.headers["Retry-After"] == "1"
    assert sorted(a.status_code for a in answers) == [200] * LOOKUPS
    fake_payu.refunds_read_delay_s = 0
    fake_payu.owed = [owed[LOOKUPS]]
    (again,) = await fake_payu.deliver(payu_caller)
    assert again.json() == {"received": True, "applied": True}
    for session_id in sessions:
        assert (await record(client, shop, session_id))["status"] == "REFUNDED"
