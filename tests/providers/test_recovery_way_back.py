"""The customer's way back goes through payorch: after a sandbox decline, under the application's
recovery policy, payorch closes the sandbox's checkout and opens the next attempt at Stripe (its
fake at the HTTP boundary); otherwise it sends the customer on to the merchant, as before."""

from __future__ import annotations

import uuid
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest
import trio

from payorch.config import Settings
from payorch.runtime import Runtime
from payorch.storage.database import Database
from tests import fake_stripe as stripe_fake
from tests.fake_stripe import FakeStripe
from tests.helpers import Client, Shop, eventually, expire_now, put_routing
from tests.providers.api_support import created as _created
from tests.providers.api_support import events as _events
from tests.providers.api_support import record as _record
from tests.providers.test_merchant_routing import _shop, settings, stripe_sender  # noqa: F401

# The Stripe SDK's HTTPXClient hands httpx the encoded form as `data=`, which httpx deprecates.
pytestmark = pytest.mark.filterwarnings("ignore:Use 'content=<...>':DeprecationWarning")
fake_stripe = stripe_fake.fake_stripe

SUCCESS, FAILURE = "https://shop.example/ok", "https://shop.example/ko"
SANDBOX_FIRST = {"type": "priority", "providers": ["sandbox", "stripe"]}
DECLINED_CARD, PAYING_CARD = "4000000000000002", "4242424242424242"


@pytest.fixture
async def shop(client: Client, db: Database, settings: Settings, fake_stripe: FakeStripe) -> Shop:  # noqa: F811
    return await _shop(client, db, settings, stripe_methods=("card",))


async def _session(client: Client, shop: Shop, recovery: dict[str, Any] | None = None) -> dict[str, Any]:
    """A session created at the sandbox first, Stripe next, under `recovery`."""
    document: dict[str, Any] = {"default": SANDBOX_FIRST}
    if recovery is not None:
        document["recovery"] = recovery
    await put_routing(client, shop, document)
    created = await _created(
        client, shop, f"key-{uuid.uuid4()}", redirectUrls={"success": SUCCESS, "failure": FAILURE}
    )
    assert created["routing"]["selectedProvider"] == "sandbox"
    return created


def _local(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.path}?{parts.query}" if parts.query else parts.path


async def _pay_at_sandbox(client: Client, checkout_url: str, card: str) -> str:
    """Pay at the sandbox's page: where it sends the customer (payorch's return route)."""
    response = await client.post(urlsplit(checkout_url).path, form={"card_number": card})
    assert response.status_code == 303
    location: str = response.headers["Location"]
    return location


async def _come_back(client: Client, return_url: str) -> str:
    """The return route's 303: where payorch sends the customer on."""
    response = await client.get(_local(return_url))
    assert response.status_code == 303, await response.get_data(as_text=True)
    location: str = response.headers["Location"]
    return location


def _stripe_checkouts(fake: FakeStripe) -> set[str]:
    return {r.answer["id"] for r in fake.requests_to("POST", "/v1/checkout/sessions") if r.status == 200}


def _stripe_url(fake: FakeStripe) -> str:
    """The URL of the one checkout Stripe created (asked once, or again with the same key)."""
    (url,) = {r.answer["url"] for r in fake.requests_to("POST", "/v1/checkout/sessions") if r.status == 200}
    return str(url)


async def test_the_sandbox_sends_the_customer_back_through_payorchs_return_route(
    client: Client, shop: Shop
) -> None:
    created = await _session(client, shop)
    back = await _pay_at_sandbox(client, created["checkoutUrl"], DECLINED_CARD)
    assert urlsplit(back).path == f"/checkout/{created['sessionId']}/return"
    assert urlsplit(back).query == "attempt=1"


async def test_a_declined_payment_goes_on_to_the_next_providers_checkout_and_completes_there(
    client: Client,
    shop: Shop,
    db: Database,
    fake_stripe: FakeStripe,
    stripe_sender: httpx.AsyncClient,  # noqa: F811
) -> None:
    created = await _session(client, shop, {"maxAttempts": 2})
    back = await _pay_at_sandbox(client, created["checkoutUrl"], DECLINED_CARD)
    assert await _come_back(client, back) == _stripe_url(fake_stripe)

    record = await _record(client, shop, created["sessionId"])
    assert (record["status"], record["providerName"]) == ("PENDING", "stripe")
    assert (record["routing"]["selectedProvider"], record["routing"]["reason"]) == ("stripe", "recovery")
    declined, opened = record["attempts"]
    assert (
        declined["provider"],
        declined["status"],
        declined["failureReason"],
        declined["providerCode"],
    ) == (
        "sandbox",
        "DECLINED",
        "CARD_DECLINED",
        "card_declined",
    )
    assert (opened["provider"], opened["status"]) == ("stripe", "OPEN")
    (sent,) = fake_stripe.requests_to("POST", "/v1/checkout/sessions")
    assert _local(sent.form["success_url"]) == f"/checkout/{created['sessionId']}/return?attempt=2"
    assert _local(sent.form["cancel_url"]) == f"/checkout/{created['sessionId']}/return?attempt=2"

    (checkout_id,) = _stripe_checkouts(fake_stripe)
    (answer,) = await fake_stripe.deliver(fake_stripe.pay(checkout_id), via=stripe_sender)
    assert answer.status_code == 200

    async def succeeded() -> dict[str, Any] | None:
        found = await _record(client, shop, created["sessionId"])
        return found if found["status"] == "SUCCEEDED" else None

    done = await eventually(succeeded)
    assert len(done["attempts"]) == 2
    assert [event["type"] for event in await _events(db, created["sessionId"])] == ["session.completed"]


async def test_the_first_attempts_checkout_refuses_payment_once_the_next_is_open(
    client: Client, shop: Shop, fake_stripe: FakeStripe
) -> None:
    created = await _session(client, shop, {"maxAttempts": 2})
    await _come_back(client, await _pay_at_sandbox(client, created["checkoutUrl"], DECLINED_CARD))
    late = await client.post(urlsplit(created["checkoutUrl"]).path, form={"card_number": PAYING_CARD})
    assert late.status_code == 410
    assert (await _record(client, shop, created["sessionId"]))["status"] == "PENDING"


async def test_a_code_the_policy_never_retries_goes_to_the_failure_url(
    client: Client, shop: Shop, fake_stripe: FakeStripe
) -> None:
    created = await _session(client, shop, {"maxAttempts": 2, "neverRetry": ["card_declined"]})
    back = await _pay_at_sandbox(client, created["checkoutUrl"], DECLINED_CARD)
    assert await _come_back(client, back) == FAILURE
    record = await _record(client, shop, created["sessionId"])
    assert (record["status"], len(record["attempts"])) == ("PENDING", 1)
    assert _stripe_checkouts(fake_stripe) == set()


async def test_without_a_recovery_policy_a_decline_goes_to_the_failure_url_in_one_attempt(
    client: Client, shop: Shop, fake_stripe: FakeStripe
) -> None:
    created = await _session(client, shop)
    assert (
        await _come_back(client, await _pay_at_sandbox(client, created["checkoutUrl"], DECLINED_CARD))
        == FAILURE
    )
    record = await _record(client, shop, created["sessionId"])
    assert (record["status"], len(record["attempts"])) == ("PENDING", 1)
    assert _stripe_checkouts(fake_stripe) == set()


async def test_after_the_last_attempt_a_decline_goes_to_the_failure_url(
    client: Client, shop: Shop, fake_stripe: FakeStripe
) -> None:
    created = await _session(client, shop, {"maxAttempts": 1})
    assert (
        await _come_back(client, await _pay_at_sandbox(client, created["checkoutUrl"], DECLINED_CARD))
        == FAILURE
    )
    assert len((await _record(client, shop, created["sessionId"]))["attempts"]) == 1


async def test_a_paid_sessions_return_goes_to_the_success_url(client: Client, shop: Shop) -> None:
    created = await _session(client, shop, {"maxAttempts": 2})
    assert (
        await _come_back(client, await _pay_at_sandbox(client, created["checkoutUrl"], PAYING_CARD))
        == SUCCESS
    )
    assert len((await _record(client, shop, created["sessionId"]))["attempts"]) == 1


async def test_a_return_twice_opens_one_next_attempt(
    client: Client, shop: Shop, fake_stripe: FakeStripe
) -> None:
    created = await _session(client, shop, {"maxAttempts": 2})
    back = await _pay_at_sandbox(client, created["checkoutUrl"], DECLINED_CARD)
    first = await _come_back(client, back)
    again = await _come_back(client, back)
    assert first == again == _stripe_url(fake_stripe)
    assert len((await _record(client, shop, created["sessionId"]))["attempts"]) == 2


async def test_returns_at_once_open_one_next_attempt(
    client: Client, shop: Shop, fake_stripe: FakeStripe
) -> None:
    created = await _session(client, shop, {"maxAttempts": 2})
    back = await _pay_at_sandbox(client, created["checkoutUrl"], DECLINED_CARD)
    sent_on: list[str] = []

    async def come_back() -> None:
        sent_on.append(await _come_back(client, back))

    async with trio.open_nursery() as nursery:
        for _ in range(4):
            nursery.start_soon(come_back)
    record = await _record(client, shop, created["sessionId"])
    assert len(record["attempts"]) == 2
    assert len(_stripe_checkouts(fake_stripe)) == 1
    assert set(sent_on) == {_stripe_url(fake_stripe)}


async def test_an_expired_session_opens_no_attempt(
    client: Client, shop: Shop, db: Database, fake_stripe: FakeStripe
) -> None:
    created = await _session(client, shop, {"maxAttempts": 2})
    back = await _pay_at_sandbox(client, created["checkoutUrl"], DECLINED_CARD)
    await expire_now(db, created["sessionId"])
    assert await _come_back(client, back) == FAILURE
    assert len((await _record(client, shop, created["sessionId"]))["attempts"]) == 1
    assert _stripe_checkouts(fake_stripe) == set()


async def test_another_merchants_policy_never_reaches_a_session(
    client: Client,
    db: Database,
    settings: Settings,  # noqa: F811
    shop: Shop,
    fake_stripe: FakeStripe,
) -> None:
    other = await _shop(client, db, settings, stripe_methods=("card",))
    created = await _session(client, shop)  # no recovery here
    await put_routing(client, other, {"default": SANDBOX_FIRST, "recovery": {"maxAttempts": 3}})
    assert (
        await _come_back(client, await _pay_at_sandbox(client, created["checkoutUrl"], DECLINED_CARD))
        == FAILURE
    )
    record = await _record(client, shop, created["sessionId"])
    assert (record["status"], len(record["attempts"]), record["providerName"]) == ("PENDING", 1, "sandbox")
    assert _stripe_checkouts(fake_stripe) == set()


async def test_an_unknown_session_or_attempt_is_404(client: Client, shop: Shop) -> None:
    created = await _session(client, shop)
    for path in (
        f"/checkout/{uuid.uuid4()}/return?attempt=1",
        "/checkout/not-a-session/return?attempt=1",
        f"/checkout/{created['sessionId']}/return?attempt=x",
        f"/checkout/{created['sessionId']}/return?attempt=0",
    ):
        assert (await client.get(path)).status_code == 404, path


async def test_a_cancel_at_the_next_provider_goes_through_payorch_to_the_failure_url(
    client: Client, shop: Shop, fake_stripe: FakeStripe
) -> None:
    created = await _session(client, shop, {"maxAttempts": 3})
    await _come_back(client, await _pay_at_sandbox(client, created["checkoutUrl"], DECLINED_CARD))
    (sent,) = fake_stripe.requests_to("POST", "/v1/checkout/sessions")
    assert await _come_back(client, sent.form["cancel_url"]) == FAILURE
    record = await _record(client, shop, created["sessionId"])
    assert (record["status"], len(record["attempts"]), record["providerName"]) == ("PENDING", 2, "stripe")


async def test_returns_past_the_applications_bound_are_503_and_ask_neither_actor_nor_provider(
    runtime: Runtime, client: Client, shop: Shop, fake_stripe: FakeStripe
) -> None:
    created = await _session(client, shop, {"maxAttempts": 2})
    back = await _pay_at_sandbox(client, created["checkoutUrl"], DECLINED_CARD)
    returns = runtime.services.limits.checkout_returns
    key = shop.application_id
    for _ in range(returns.per_key):  # every place taken, as by a stranger's flood of returns
        assert returns.try_enter(key)
    response = await client.get(_local(back))
    assert response.status_code == 503
    assert response.headers["Retry-After"] == "1"
    record = await _record(client, shop, created["sessionId"])
    assert (record["status"], len(record["attempts"])) == ("PENDING", 1)
    assert _stripe_checkouts(fake_stripe) == set()
    for _ in range(returns.per_key):
        returns.leave(key)
    assert await _come_back(client, back) == _stripe_url(fake_stripe)
