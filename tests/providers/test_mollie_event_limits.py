"""What an unauthenticated caller of Mollie's webhook route can make payorch do: only ids of Mollie's
own form reach Mollie's API, a few lookups per application run at once (the rest are answered 503
for Mollie to call again), and one address posts events at a bounded rate."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest
import trio

from payorch.config import LimitSettings, Settings
from payorch.runtime import Runtime
from payorch.storage.database import Database
from tests import fake_mollie as mollie_fake
from tests.fake_mollie import FakeMollie, ScriptedFailure
from tests.helpers import Client, Shop, eventually
from tests.providers.api_support import created, record
from tests.providers.mollie_support import MOLLIE_KEY, mollie_settings, new_linked_shop, payment_of

fake_mollie = mollie_fake.fake_mollie

LOOKUPS = 2
EVENTS_BURST = 5


@pytest.fixture
def settings(settings: Settings, fake_mollie: FakeMollie) -> Settings:
    fake_mollie.accept_key(MOLLIE_KEY)
    limits = LimitSettings(
        provider_events_per_address_per_second=0.01,
        provider_events_per_address_burst=EVENTS_BURST,
        provider_event_lookups_per_application=LOOKUPS,
    )
    return mollie_settings(settings, fake_mollie).model_copy(update={"limits": limits})


def _caller(runtime: Runtime, address: str) -> httpx.AsyncClient:
    """HTTP into payorch's app from `address`."""
    transport = httpx.ASGITransport(app=runtime.app, client=(address, 40000))  # type: ignore[arg-type]
    return httpx.AsyncClient(transport=transport)


@pytest.fixture
async def mollie_caller(runtime: Runtime) -> AsyncIterator[httpx.AsyncClient]:
    async with _caller(runtime, "198.51.100.7") as client:
        yield client


@pytest.fixture
async def shop(client: Client, db: Database, settings: Settings) -> Shop:
    return await new_linked_shop(client, db, settings, ("mollie", MOLLIE_KEY))


@pytest.mark.parametrize(
    "forged_id",
    ["tr_/../../customers", "tr_%2F..%2F..%2Fcustomers", "tr_abc/refunds", "tr_abc%3Fx=1", "tr_abc%0A"],
)
async def test_a_webhook_id_not_of_mollies_form_is_400_and_never_reaches_mollies_api(
    client: Client, shop: Shop, fake_mollie: FakeMollie, mollie_caller: httpx.AsyncClient, forged_id: str
) -> None:
    session = await created(client, shop)
    url = fake_mollie.payment(payment_of(fake_mollie, session["sessionId"]))["webhookUrl"]
    asked = len(fake_mollie.requests)
    answer = await mollie_caller.post(
        url, content=f"id={forged_id}".encode(), headers={"Content-Type": "application/x-www-form-urlencoded"}
    )
    assert answer.status_code == 400
    assert (
        answer.json()["message"]
        == "event rejected: not a Mollie webhook call: its id is not of Mollie's form"
    )
    assert len(fake_mollie.requests) == asked


async def test_lookups_past_the_applications_share_are_503_and_apply_when_mollie_calls_again(
    client: Client, shop: Shop, fake_mollie: FakeMollie, mollie_caller: httpx.AsyncClient
) -> None:
    session = await created(client, shop)
    payment_id = payment_of(fake_mollie, session["sessionId"])
    fake_mollie.pay(payment_id)
    path = f"/v2/payments/{payment_id}"
    fake_mollie.fail_next("GET", path, *[ScriptedFailure(status=None, delay_s=1.0)] * LOOKUPS)
    answers: list[httpx.Response] = []

    async def call() -> None:
        answers.append(await fake_mollie.call_webhook(payment_id, via=mollie_caller))

    async with trio.open_nursery() as nursery:
        for _ in range(LOOKUPS):
            nursery.start_soon(call)

        async def every_slot_waits_on_mollie() -> bool | None:
            return fake_mollie.scripted_left() == 0 or None

        await eventually(every_slot_waits_on_mollie)
        shed = await fake_mollie.call_webhook(payment_id, via=mollie_caller)
        assert shed.status_code == 503
        assert shed.headers["Retry-After"] == "1"
    assert len(fake_mollie.requests_to("GET", path)) == LOOKUPS  # the shed call asked nothing
    assert sorted(a.status_code for a in answers) == [200] * LOOKUPS
    assert (await record(client, shop, session["sessionId"]))["status"] == "SUCCEEDED"
    again = await fake_mollie.call_webhook(payment_id, via=mollie_caller)
    assert again.status_code == 200


async def test_one_address_posting_events_past_its_burst_is_429_while_another_address_is_served(
    client: Client, shop: Shop, fake_mollie: FakeMollie, runtime: Runtime
) -> None:
    session = await created(client, shop)
    payment_id = payment_of(fake_mollie, session["sessionId"])
    async with _caller(runtime, "203.0.113.9") as stranger:
        for _ in range(EVENTS_BURST):
            assert (
                await fake_mollie.call_webhook(
                    "tr_forged0000", via=stranger, url=_url(fake_mollie, payment_id)
                )
            ).status_code == 200
        asked = len(fake_mollie.requests)
        refused = await fake_mollie.call_webhook(payment_id, via=stranger)
        assert refused.status_code == 429
        assert int(refused.headers["Retry-After"]) >= 1
        assert len(fake_mollie.requests) == asked
    fake_mollie.pay(payment_id)
    async with _caller(runtime, "198.51.100.20") as mollie:
        answer = await fake_mollie.call_webhook(payment_id, via=mollie)
    assert answer.json() == {"received": True, "applied": True}


def _url(fake: FakeMollie, payment_id: str) -> str:
    url: str = fake.payment(payment_id)["webhookUrl"]
    return url
