"""Routing between two real providers: Stripe and Mollie both linked, each at its fake on loopback
(tests/fake_stripe.py, tests/fake_mollie.py), both running at once. The route follows the merchant's
routing document, a creation that fails or times out at one cascades to the other (both ways), and
a provider that keeps failing for one shop is skipped by that shop for its cool-down, by every shop
when it fails for several."""

from __future__ import annotations

from decimal import Decimal

import pytest
import trio

from payorch.config import EngineSettings, Settings
from payorch.engine.provider_health import Circuit
from payorch.runtime import Runtime, open_runtime
from payorch.storage.database import Database
from tests import fake_mollie as mollie_fake
from tests import fake_stripe as stripe_fake
from tests.fake_mollie import FakeMollie, ReceivedMollieRequest, ScriptedFailure
from tests.fake_stripe import FakeStripe
from tests.helpers import (
    Client,
    Shop,
    account_figures,
    create_session,
    eventually,
    prefer,
    put_routing,
    session_body,
)
from tests.providers.api_support import created, health_account, record
from tests.providers.mollie_support import MOLLIE_KEY, mollie_settings, new_linked_shop

# The Stripe SDK's HTTPXClient hands httpx the encoded form as `data=`, which httpx deprecates.
pytestmark = pytest.mark.filterwarnings("ignore:Use 'content=<...>':DeprecationWarning")

fake_mollie = mollie_fake.fake_mollie
fake_stripe = stripe_fake.fake_stripe
STRIPE_KEY = "sk_test_51ShopKey0123456789abcdef"
BOTH = (("stripe", STRIPE_KEY), ("mollie", MOLLIE_KEY))


@pytest.fixture
def settings(settings: Settings, fake_mollie: FakeMollie, fake_stripe: FakeStripe) -> Settings:
    fake_mollie.accept_key(MOLLIE_KEY)
    fake_stripe.accept_key(STRIPE_KEY)
    return mollie_settings(settings, fake_mollie, stripe_api_base=fake_stripe.url)


@pytest.fixture
async def shop(client: Client, db: Database, settings: Settings) -> Shop:
    """A merchant's application linked to Stripe and Mollie."""
    return await new_linked_shop(client, db, settings, *BOTH)


async def _prefer(client: Client, shop: Shop, provider: str) -> None:
    """Route the shop's sessions to `provider` first, then the other (a priority route)."""
    other = {"mollie": "stripe", "stripe": "mollie"}[provider]
    await prefer(client, shop, provider, other)


async def _served(fake: FakeMollie) -> list[ReceivedMollieRequest] | None:
    return fake.requests_to("POST", "/v2/payments") or None


def _mollie_creations(fake: FakeMollie) -> list[int]:
    return [r.status for r in fake.requests_to("POST", "/v2/payments")]


def _stripe_creations(fake: FakeStripe) -> list[int]:
    return [r.status for r in fake.requests_to("POST", "/v1/checkout/sessions")]


async def test_with_stripe_and_mollie_linked_the_route_follows_the_merchants_document(
    client: Client,
    db: Database,
    shop: Shop,
    runtime: Runtime,
    fake_mollie: FakeMollie,
    fake_stripe: FakeStripe,
) -> None:
    # No document: the default dynamic route, and before any outcome both rank equal, by name.
    first = await created(client, shop, "first")
    assert first["routing"] | {"score": None} == {
        "selectedProvider": "mollie",
        "score": None,
        "rule": None,
        "reason": "dynamic",
        "version": 0,
    }
    assert (_mollie_creations(fake_mollie), _stripe_creations(fake_stripe)) == ([201], [])
    # A failed checkout creation at Mollie weighs on its score (docs/routing.md): with its circuit
    # still closed, the dynamic route now ranks Stripe first.
    mollie = await health_account(db, shop, "mollie")
    runtime.services.context.health.record_failure(mollie, 0.1, trio.current_time(), provider_wide=False)
    assert (await created(client, shop, "second"))["routing"]["selectedProvider"] == "stripe"
    await put_routing(
        client,
        shop,
        {
            "rules": [
                {
                    "name": "pln-stripe",
                    "when": {"currencies": ["PLN"]},
                    "route": {"type": "priority", "providers": ["stripe", "mollie"]},
                }
            ]
        },
    )
    third = await created(client, shop, "third")
    assert (third["routing"]["selectedProvider"], third["routing"]["rule"], third["routing"]["version"]) == (
        "stripe",
        "pln-stripe",
        1,
    )
    assert (_mollie_creations(fake_mollie), _stripe_creations(fake_stripe)) == ([201], [200, 200])
    stored = (await record(client, shop, third["sessionId"]))["routing"]
    assert stored == third["routing"] | {"score": Decimal(str(third["routing"]["score"]))}


async def test_mollie_answering_500_at_creation_cascades_to_stripe(
    client: Client, shop: Shop, runtime: Runtime, fake_mollie: FakeMollie, fake_stripe: FakeStripe
) -> None:
    await _prefer(client, shop, "mollie")
    fake_mollie.fail_next("POST", "/v2/payments", 500)
    session = await created(client, shop)
    assert session["routing"]["selectedProvider"] == "stripe"
    assert (await record(client, shop, session["sessionId"]))["providerName"] == "stripe"
    (attempt,) = fake_mollie.requests_to("POST", "/v2/payments")
    assert (attempt.status, attempt.headers["idempotency-key"]) == (
        500,
        f"payorch-session-{session['sessionId']}",
    )
    assert _stripe_creations(fake_stripe) == [200]
    assert runtime.services.context.health.snapshot(trio.current_time())["mollie"].consecutive_failures == 1


async def test_stripe_answering_500_at_creation_cascades_back_to_mollie(
    client: Client, shop: Shop, runtime: Runtime, fake_mollie: FakeMollie, fake_stripe: FakeStripe
) -> None:
    await _prefer(client, shop, "stripe")
    fake_stripe.fail_next("POST", "/v1/checkout/sessions", 500, 500, 500)
    session = await created(client, shop)
    assert session["routing"]["selectedProvider"] == "mollie"
    assert session["checkoutUrl"].startswith(fake_mollie.url)
    assert _stripe_creations(fake_stripe) == [500, 500, 500]
    assert _mollie_creations(fake_mollie) == [201]


async def test_mollie_timing_out_at_creation_cascades_to_stripe_and_its_late_payment_stays_the_only_one(
    db: Database, settings: Settings, fake_mollie: FakeMollie, fake_stripe: FakeStripe
) -> None:
    impatient = settings.model_copy(update={"engine": EngineSettings(provider_timeout_s=1.0)})
    async with open_runtime(impatient, db) as runtime:
        client = runtime.app.test_client()
        shop = await new_linked_shop(client, db, impatient, *BOTH)
        await _prefer(client, shop, "mollie")
        # Mollie takes 3 s, and then creates the payment: payorch gave up on it after 1 s.
        fake_mollie.fail_next("POST", "/v2/payments", ScriptedFailure(status=None, delay_s=3))
        session = await created(client, shop)
        stored = await record(client, shop, session["sessionId"])
        assert (
            runtime.services.context.health.snapshot(trio.current_time())["mollie"].consecutive_failures == 1
        )
    assert session["routing"]["selectedProvider"] == stored["providerName"] == "stripe"
    assert session["checkoutUrl"] == fake_stripe.only("POST", "/v1/checkout/sessions").answer["url"]
    # The abandoned call reaches Mollie late, carrying the session's key: at most this one payment
    # exists at Mollie for the session, unpaid, its checkout link known to no one; it expires there.
    (abandoned,) = await eventually(lambda: _served(fake_mollie))
    assert abandoned.headers["idempotency-key"] == f"payorch-session-{session['sessionId']}"
    assert fake_mollie.payment(abandoned.answer["id"])["status"] == "open"


async def test_a_mollie_account_that_keeps_failing_is_skipped_for_its_cool_down_for_that_shop_only(
    client: Client,
    db: Database,
    settings: Settings,
    runtime: Runtime,
    fake_mollie: FakeMollie,
) -> None:
    mollie_only = await new_linked_shop(client, db, settings, ("mollie", MOLLIE_KEY))
    fake_mollie.fail_next("POST", "/v2/payments", 500, 500, 500)
    for attempt in range(3):
        response = await create_session(client, mollie_only, f"down-{attempt}", session_body())
        assert response.status_code != 201
    now = trio.current_time()
    figures = account_figures(
        runtime.services.context.health, await health_account(db, mollie_only, "mollie"), now
    )
    assert figures is not None
    assert (figures.consecutive_failures, figures.circuit) == (3, Circuit.OPEN)
    assert figures.reopens_at is not None and 29 < figures.reopens_at - now <= 30
    response = await create_session(client, mollie_only, "while-open", session_body())
    assert response.status_code == 502
    assert _mollie_creations(fake_mollie) == [500, 500, 500]  # not asked while its circuit is open

    # Failures of one account are not Mollie's: another shop's payments go to Mollie meanwhile.
    other = await new_linked_shop(client, db, settings, ("mollie", MOLLIE_KEY))
    session = await created(client, other, "other shop")
    assert session["routing"]["selectedProvider"] == "mollie"
    assert _mollie_creations(fake_mollie) == [500, 500, 500, 201]
    # Once the 30 s cool-down is over, one session of the shop may try Mollie again (the probe).
    probe = account_figures(
        runtime.services.context.health, await health_account(db, mollie_only, "mollie"), now + 30
    )
    assert probe is not None and probe.circuit is Circuit.HALF_OPEN


async def test_a_mollie_failing_for_several_shops_is_skipped_by_every_shop_for_its_cool_down(
    client: Client,
    db: Database,
    settings: Settings,
    runtime: Runtime,
    fake_mollie: FakeMollie,
    fake_stripe: FakeStripe,
) -> None:
    fake_mollie.fail_next("POST", "/v2/payments", 500, 500, 500)
    for shop_number in range(3):  # Mollie answers 500 to three shops in a row: Mollie is failing
        shop = await new_linked_shop(client, db, settings, ("mollie", MOLLIE_KEY))
        response = await create_session(client, shop, "down", session_body())
        assert response.status_code == 502, shop_number
    now = trio.current_time()
    figures = runtime.services.context.health.snapshot(now)["mollie"]
    assert (figures.consecutive_failures, figures.circuit) == (3, Circuit.OPEN)
    assert figures.reopens_at is not None and 29 < figures.reopens_at - now <= 30

    both = await new_linked_shop(client, db, settings, *BOTH)
    session = await created(client, both, "while-open")
    assert session["routing"]["selectedProvider"] == "stripe"
    assert _mollie_creations(fake_mollie) == [500, 500, 500]  # not asked while its circuit is open
    assert runtime.services.context.health.snapshot(now + 30)["mollie"].circuit is Circuit.HALF_OPEN
