"""A provider answering 429 or 5xx in the middle of a run, through the API, against the fake Stripe and
the fake Mollie: the page is asked again after the provider's `Retry-After` (or a doubling pause) and
the run goes on where it was; a page still busy after every try, or a `Retry-After` longer than a run
waits, ends the run FAILED saying so, and a later run reads it all; while a run waits, its turn goes
to another merchant's run."""

from __future__ import annotations

from typing import Any

import pytest
import trio

from payorch.config import ReconciliationSettings, Settings
from payorch.storage.database import Database
from tests import fake_mollie as mollie_fake
from tests import fake_stripe as stripe_fake
from tests.clock import ShiftedClock
from tests.fake_mollie import FakeMollie
from tests.fake_stripe import RATE_LIMITED, FakeStripe, ScriptedFailure
from tests.helpers import (
    Client,
    Shop,
    eventually,
    new_api_key,
    new_application,
    new_merchant,
    new_shop,
    post_json,
)
from tests.providers.mollie_support import MOLLIE_KEY, mollie_settings
from tests.providers.test_mollie_settlements import TOKEN, _paid_payment
from tests.providers.test_stripe import STRIPE_KEY, _stripe_shop
from tests.reconciliation.test_sandbox_runs import today

fake_stripe = stripe_fake.fake_stripe
fake_mollie = mollie_fake.fake_mollie

pytestmark = pytest.mark.filterwarnings("ignore:Use 'content=<...>':DeprecationWarning")

ATTEMPTS = 3
CHARGES = 150  # two pages of Stripe's balance transactions (100 a page)
BALANCE = "/v1/balance_transactions"
SETTLEMENTS = "/v2/settlements"  # the settlements, and each one's payments, refunds, chargebacks
STRIPE_UNAVAILABLE = ScriptedFailure(
    503, body={"error": {"type": "api_error", "message": "Try again later."}}
)
MOLLIE_RATE_LIMITED = "You have exceeded the rate limit. Please try again later."


@pytest.fixture
def settings(settings: Settings, fake_stripe: FakeStripe, fake_mollie: FakeMollie) -> Settings:
    """Stripe and Mollie at their fakes; one run at a time in the process, so that a run waiting for
    its provider shows whether it gives its turn away; short pauses, three tries of a page."""
    fake_stripe.accept_key(STRIPE_KEY)
    fake_stripe.available_after_days = 0  # settled the day it is paid: today's run reads it
    fake_mollie.accept_organization_token(TOKEN, fake_mollie.accept_key(MOLLIE_KEY))
    reconciliation = ReconciliationSettings(
        daily=False, page_attempts=ATTEMPTS, page_retry_first_s=0.05, page_retry_max_s=5
    )
    limits = settings.limits.model_copy(update={"background_per_merchant": 1})
    return mollie_settings(settings, fake_mollie, stripe_api_base=fake_stripe.url).model_copy(
        update={"reconciliation": reconciliation, "limits": limits}
    )


async def start_run(client: Client, shop: Shop, provider: str, day: str) -> str:
    started = await post_json(
        client,
        f"/api/v1/applications/{shop.application_id}/reconciliations",
        {"provider": provider, "from": day, "to": day},
        shop.merchant.headers,
    )
    assert started.status_code == 202, await started.get_data(as_text=True)
    return str((await started.get_json())["id"])


async def run_of(client: Client, shop: Shop, run_id: str) -> dict[str, Any]:
    path = f"/api/v1/applications/{shop.application_id}/reconciliations/{run_id}?limit=1"
    response = await client.get(path, headers=shop.merchant.headers)
    assert response.status_code == 200, await response.get_data(as_text=True)
    body: dict[str, Any] = await response.get_json()
    return body


async def ended(client: Client, shop: Shop, run_id: str, timeout_s: float = 20.0) -> dict[str, Any]:
    async def done() -> dict[str, Any] | None:
        run = await run_of(client, shop, run_id)
        return run if run["status"] != "RUNNING" else None

    return await eventually(done, timeout_s)


def settlement_answers(fake: FakeMollie, since: int) -> list[int]:
    """The statuses Mollie answered to settlement reads, from its `since`-th request on."""
    return [r.status for r in fake.requests[since:] if r.path.startswith(SETTLEMENTS)]


def item_count(run: dict[str, Any]) -> int:
    return int(run["items"]["totalItems"])


async def stripe_shop_with_charges(
    client: Client, db: Database, settings: Settings, fake: FakeStripe
) -> Shop:
    shop = await _stripe_shop(client, db, settings)
    for n in range(CHARGES):
        fake.charge(STRIPE_KEY, 1000 + n)
    return shop


async def mollie_shop_with_settlement(
    client: Client, db: Database, settings: Settings, fake: FakeMollie
) -> Shop:
    merchant = await new_merchant(client, db, settings)
    application = await new_application(client, merchant)
    linked = await client.post(
        f"/api/v1/applications/{application['id']}/providers",
        json={
            "name": "mollie",
            "paymentMethods": ["card"],
            "credentials": {"apiKey": MOLLIE_KEY, "organizationToken": TOKEN},
        },
        headers=merchant.headers,
    )
    assert linked.status_code == 201, await linked.get_data(as_text=True)
    key = await new_api_key(client, merchant, application["id"])
    fake.settle(MOLLIE_KEY, [_paid_payment(fake, "10.00"), _paid_payment(fake, "20.00")])
    return Shop(merchant=merchant, application_id=application["id"], api_key=key["key"])


@pytest.mark.parametrize(
    "failure",
    [RATE_LIMITED, ScriptedFailure(500), STRIPE_UNAVAILABLE],
    ids=["rate_limited_429", "internal_error_500", "unavailable_503"],
)
async def test_stripe_failing_the_second_page_is_asked_again_and_the_run_completes(
    client: Client,
    db: Database,
    settings: Settings,
    clock: ShiftedClock,
    fake_stripe: FakeStripe,
    failure: ScriptedFailure,
) -> None:
    shop = await stripe_shop_with_charges(client, db, settings, fake_stripe)
    fake_stripe.fail_next("GET", BALANCE, ScriptedFailure(None), failure, failure)

    run = await ended(client, shop, await start_run(client, shop, "stripe", today(clock)))

    assert run["status"] == "COMPLETED", run
    assert item_count(run) == CHARGES
    answered = [(r.status, r.query.get("starting_after")) for r in fake_stripe.requests_to("GET", BALANCE)]
    assert [status for status, _ in answered] == [200, failure.status, failure.status, 200]
    first_page, *second_page = answered
    assert first_page[1] is None
    assert len({after for _, after in second_page}) == 1  # the same page asked again, not from the start


async def test_a_page_still_failing_after_every_try_fails_the_run_saying_so_and_a_later_run_reads_it_all(
    client: Client, db: Database, settings: Settings, clock: ShiftedClock, fake_stripe: FakeStripe
) -> None:
    shop = await stripe_shop_with_charges(client, db, settings, fake_stripe)
    fake_stripe.fail_next("GET", BALANCE, ScriptedFailure(None), *[STRIPE_UNAVAILABLE] * ATTEMPTS)

    failed = await ended(client, shop, await start_run(client, shop, "stripe", today(clock)))

    assert failed["status"] == "FAILED"
    assert "503" in failed["error"]
    assert f"still so after {ATTEMPTS} tries of the page: start the run again later" in failed["error"]
    assert len(fake_stripe.requests_to("GET", BALANCE)) == 1 + ATTEMPTS

    again = await ended(client, shop, await start_run(client, shop, "stripe", today(clock)))
    assert again["status"] == "COMPLETED", again
    assert item_count(again) == CHARGES


async def test_mollie_rate_limiting_a_page_is_waited_out_as_its_retry_after_says(
    client: Client, db: Database, settings: Settings, clock: ShiftedClock, fake_mollie: FakeMollie
) -> None:
    shop = await mollie_shop_with_settlement(client, db, settings, fake_mollie)
    rate_limited = mollie_fake.ScriptedFailure(429, detail=MOLLIE_RATE_LIMITED, headers={"Retry-After": "1"})
    fake_mollie.fail_next("GET", SETTLEMENTS, mollie_fake.ScriptedFailure(None), rate_limited)
    started, since = trio.current_time(), len(fake_mollie.requests)

    run = await ended(client, shop, await start_run(client, shop, "mollie", today(clock)))

    assert run["status"] == "COMPLETED", run
    assert trio.current_time() - started >= 1.0  # not the run's own 0.05 s: Mollie's second
    assert settlement_answers(fake_mollie, since)[:3] == [200, 429, 200]
    assert run["counts"]["MISSING_IN_PAYORCH"] == 2  # the two payments, paid outside payorch


async def test_mollie_failing_a_page_with_a_5xx_is_asked_again_and_the_run_completes(
    client: Client, db: Database, settings: Settings, clock: ShiftedClock, fake_mollie: FakeMollie
) -> None:
    shop = await mollie_shop_with_settlement(client, db, settings, fake_mollie)
    fake_mollie.fail_next("GET", SETTLEMENTS, mollie_fake.ScriptedFailure(None), 503, 502)
    since = len(fake_mollie.requests)

    run = await ended(client, shop, await start_run(client, shop, "mollie", today(clock)))

    assert run["status"] == "COMPLETED", run
    assert settlement_answers(fake_mollie, since)[:4] == [200, 503, 502, 200]
    assert run["counts"]["MISSING_IN_PAYORCH"] == 2


async def test_a_retry_after_longer_than_a_run_waits_fails_the_run_at_once_saying_so(
    client: Client, db: Database, settings: Settings, clock: ShiftedClock, fake_mollie: FakeMollie
) -> None:
    shop = await mollie_shop_with_settlement(client, db, settings, fake_mollie)
    rate_limited = mollie_fake.ScriptedFailure(
        429, detail=MOLLIE_RATE_LIMITED, headers={"Retry-After": "3600"}
    )
    fake_mollie.fail_next("GET", SETTLEMENTS, mollie_fake.ScriptedFailure(None), rate_limited)

    run = await ended(client, shop, await start_run(client, shop, "mollie", today(clock)), timeout_s=5)

    assert run["status"] == "FAILED"
    assert "429" in run["error"]
    assert "it asked to wait 3600 s (Retry-After), longer than a run waits (5 s)" in run["error"]


async def test_a_run_waiting_for_its_provider_lets_another_merchants_run_go_first(
    client: Client, db: Database, settings: Settings, clock: ShiftedClock, fake_stripe: FakeStripe
) -> None:
    stripe_shop = await stripe_shop_with_charges(client, db, settings, fake_stripe)
    sandbox_shop = await new_shop(client, db, settings)
    waiting = ScriptedFailure(429, body=RATE_LIMITED.body, headers={"Retry-After": "3"})
    fake_stripe.fail_next("GET", BALANCE, ScriptedFailure(None), waiting)
    stripe_run = await start_run(client, stripe_shop, "stripe", today(clock))

    async def rate_limited() -> bool:
        return any(r.status == 429 for r in fake_stripe.requests_to("GET", BALANCE))

    await eventually(rate_limited)
    sandbox_run = await ended(
        client, sandbox_shop, await start_run(client, sandbox_shop, "sandbox", today(clock))
    )

    assert sandbox_run["status"] == "COMPLETED"  # with one run at a time in the process
    assert (await run_of(client, stripe_shop, stripe_run))["status"] == "RUNNING"
    finished = await ended(client, stripe_shop, stripe_run)
    assert finished["status"] == "COMPLETED"
    assert item_count(finished) == CHARGES
