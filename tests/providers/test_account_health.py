"""One merchant's provider account failing takes the provider away from that merchant only: Stripe
and Mollie at their fakes (tests/fake_stripe.py, tests/fake_mollie.py), several shops at once. A key
the provider stopped accepting opens that account's circuit, whether the failures come from session
creation or from closing checkouts at expiry; another shop with a valid key keeps its 201s."""

from __future__ import annotations

import pytest
import trio

from payorch.config import Settings
from payorch.engine.provider_health import Circuit
from payorch.runtime import Runtime
from payorch.storage.database import Database
from tests import fake_mollie as mollie_fake
from tests import fake_stripe as stripe_fake
from tests.fake_mollie import FakeMollie
from tests.fake_stripe import FakeStripe
from tests.helpers import (
    Client,
    account_figures,
    create_session,
    eventually,
    expire_now,
    prefer,
    session_body,
)
from tests.providers.api_support import created, health_account, settled
from tests.providers.mollie_support import mollie_settings, new_linked_shop, payment_of
from tests.test_metrics import scrape, value

# The Stripe SDK's HTTPXClient hands httpx the encoded form as `data=`, which httpx deprecates.
pytestmark = pytest.mark.filterwarnings("ignore:Use 'content=<...>':DeprecationWarning")

fake_mollie = mollie_fake.fake_mollie
fake_stripe = stripe_fake.fake_stripe
STRIPE_REJECTED = "sk_test_51RejectedKey0123456789abc"
STRIPE_VALID = "sk_test_51ValidKey0123456789abcdef"
MOLLIE_REJECTED = "test_Rejected0123456789abcdefghij"
MOLLIE_VALID = "test_Valid0123456789abcdefghijklm"


@pytest.fixture
def settings(settings: Settings, fake_mollie: FakeMollie, fake_stripe: FakeStripe) -> Settings:
    for key in (STRIPE_REJECTED, STRIPE_VALID):
        fake_stripe.accept_key(key)
    for key in (MOLLIE_REJECTED, MOLLIE_VALID):
        fake_mollie.accept_key(key)
    return mollie_settings(settings, fake_mollie, stripe_api_base=fake_stripe.url)


def _stripe_creations(fake: FakeStripe, api_key: str) -> list[int]:
    return [r.status for r in fake.requests_to("POST", "/v1/checkout/sessions") if r.api_key == api_key]


async def test_a_shop_whose_stripe_key_stripe_rejects_leaves_stripe_to_the_other_shops(
    client: Client, db: Database, settings: Settings, runtime: Runtime, fake_stripe: FakeStripe
) -> None:
    rejected = await new_linked_shop(client, db, settings, ("stripe", STRIPE_REJECTED))
    valid = await new_linked_shop(client, db, settings, ("stripe", STRIPE_VALID))
    fake_stripe.revoke_key(STRIPE_REJECTED)  # rolled at Stripe after it was linked
    for burst in range(5):  # bursts from both shops, well inside their rate limits
        for attempt in range(3):
            response = await create_session(client, rejected, f"rejected-{burst}-{attempt}", session_body())
            assert response.status_code == 502
        for attempt in range(2):
            session = await created(client, valid, f"valid-{burst}-{attempt}")
            assert session["routing"]["selectedProvider"] == "stripe"
    # The rejected shop's own circuit opened after 3 failures: Stripe was not asked again for it.
    assert _stripe_creations(fake_stripe, STRIPE_REJECTED) == [401, 401, 401]
    assert _stripe_creations(fake_stripe, STRIPE_VALID) == [200] * 10
    now = trio.current_time()
    own = account_figures(runtime.services.context.health, await health_account(db, rejected, "stripe"), now)
    assert own is not None and own.circuit is Circuit.OPEN
    assert runtime.services.context.health.snapshot(now)["stripe"].circuit is Circuit.CLOSED
    _, samples = await scrape(client)
    assert value(samples, "payorch_provider_account_circuits_open", provider="stripe") == 1
    assert value(samples, "payorch_provider_circuit_open", provider="stripe") == 0


async def test_a_shop_whose_stripe_key_is_rejected_is_not_routed_to_stripe_but_to_its_other_provider(
    client: Client, db: Database, settings: Settings, runtime: Runtime, fake_stripe: FakeStripe
) -> None:
    rejected = await new_linked_shop(
        client, db, settings, ("stripe", STRIPE_REJECTED), ("mollie", MOLLIE_REJECTED)
    )
    valid = await new_linked_shop(client, db, settings, ("stripe", STRIPE_VALID), ("mollie", MOLLIE_VALID))
    fake_stripe.revoke_key(STRIPE_REJECTED)
    for shop in (rejected, valid):
        await prefer(client, shop, "stripe", "mollie")
    for attempt in range(5):
        mine = await created(client, rejected, f"rejected-{attempt}")
        assert (mine["routing"]["selectedProvider"], mine["routing"]["reason"]) == ("mollie", "cascade")
        theirs = await created(client, valid, f"valid-{attempt}")
        assert (theirs["routing"]["selectedProvider"], theirs["routing"]["reason"]) == ("stripe", "rule")
    # Three rejections opened Stripe's circuit for that shop alone: its next sessions skip Stripe.
    assert _stripe_creations(fake_stripe, STRIPE_REJECTED) == [401] * 3
    assert _stripe_creations(fake_stripe, STRIPE_VALID) == [200] * 5


async def test_closing_checkouts_with_a_revoked_mollie_key_at_expiry_leaves_mollie_to_the_other_shops(
    client: Client, db: Database, settings: Settings, runtime: Runtime, fake_mollie: FakeMollie
) -> None:
    rejected = await new_linked_shop(client, db, settings, ("mollie", MOLLIE_REJECTED))
    valid = await new_linked_shop(client, db, settings, ("mollie", MOLLIE_VALID))
    sessions = [await created(client, rejected, f"expiring-{n}") for n in range(4)]
    fake_mollie.revoke_key(MOLLIE_REJECTED)  # revoked in Mollie's dashboard
    for session in sessions:
        await expire_now(db, session["sessionId"])
    for session in sessions:  # each expires all the same; closing its payment failed with 401
        stored = await settled(client, rejected, session["sessionId"])
        assert (stored["status"], stored["failureReason"]) == ("FAILED", "EXPIRED")

    async def refused_closings() -> list[int] | None:
        closings = [
            r.status
            for session in sessions
            for r in fake_mollie.requests_to(
                "DELETE", f"/v2/payments/{payment_of(fake_mollie, session['sessionId'])}"
            )
        ]
        return closings if len(closings) >= 3 else None

    assert set(await eventually(refused_closings)) == {401}
    for attempt in range(3):
        session = await created(client, valid, f"valid-{attempt}")
        assert session["routing"]["selectedProvider"] == "mollie"
    now = trio.current_time()
    own = account_figures(runtime.services.context.health, await health_account(db, rejected, "mollie"), now)
    assert own is not None and own.circuit is Circuit.OPEN
