"""Daily reconciliation through the real runtime, on the clock the test moves: each linked account
of a provider that reports settlements gets one run a day, however many processes share the
database, and a provider that fails backs off its own account alone."""

from __future__ import annotations

from datetime import UTC, timedelta
from typing import Any

import pytest
import trio

from payorch.config import ProviderSettings, ReconciliationSettings, SandboxSettings, Settings, StripeSettings
from payorch.runtime import open_runtime
from payorch.storage.database import Database
from tests import fake_stripe as stripe_fake
from tests.clock import ShiftedClock
from tests.fake_stripe import FakeStripe
from tests.helpers import Client, Shop, eventually, new_shop
from tests.providers.test_stripe import STRIPE_KEY, _stripe_shop

fake_stripe = stripe_fake.fake_stripe
DAY_S = 24 * 3600

pytestmark = pytest.mark.filterwarnings("ignore:Use 'content=<...>':DeprecationWarning")


def daily_settings(settings: Settings, **providers: Any) -> Settings:
    """Daily runs due at any hour, a failed one tried again after a minute (doubling), a busy page
    within a run after a hundredth of a second (doubling); access tokens outlive the days a test
    moves time by."""
    reconciliation = ReconciliationSettings(
        run_at_utc="00:00", retry_first_s=60, retry_max_s=3600, page_retry_first_s=0.01
    )
    auth = settings.auth.model_copy(update={"jwt_ttl_s": 7 * DAY_S})
    return settings.model_copy(
        update={
            "reconciliation": reconciliation,
            "auth": auth,
            "providers": ProviderSettings(sandbox=SandboxSettings(settlement_lag_days=1), **providers),
        }
    )


@pytest.fixture
def settings(settings: Settings) -> Settings:
    return daily_settings(settings)


async def runs_of(client: Client, shop: Shop) -> list[dict[str, Any]]:
    response = await client.get(
        f"/api/v1/applications/{shop.application_id}/reconciliations?limit=100", headers=shop.merchant.headers
    )
    assert response.status_code == 200, await response.get_data(as_text=True)
    return list((await response.get_json())["items"])


async def settle_down(client: Client, shops: list[Shop]) -> list[list[dict[str, Any]]]:
    """The shops' runs once none is RUNNING and the daily loop has had a few more rounds."""

    async def ended() -> bool:
        runs = [run for shop in shops for run in await runs_of(client, shop)]
        return all(run["status"] != "RUNNING" for run in runs)

    await eventually(ended)
    await trio.sleep(2.5)  # the loop looks every second: another run would have started by now
    await eventually(ended)
    return [await runs_of(client, shop) for shop in shops]


def lagged_day(clock: ShiftedClock, lag: int) -> str:
    return (clock.now().astimezone(UTC).date() - timedelta(days=lag)).isoformat()


async def test_each_sandbox_account_gets_one_run_a_day(
    client: Client, db: Database, settings: Settings, clock: ShiftedClock
) -> None:
    shops = [await new_shop(client, db, settings) for _ in range(2)]
    for runs in await settle_down(client, shops):
        assert [(run["provider"], run["from"], run["to"], run["status"]) for run in runs] == [
            ("sandbox", lagged_day(clock, 1), lagged_day(clock, 1), "COMPLETED")
        ]

    clock.advance(DAY_S)

    for runs in await settle_down(client, shops):
        assert [(run["from"], run["status"]) for run in runs] == [
            (lagged_day(clock, 1), "COMPLETED"),
            (lagged_day(clock, 2), "COMPLETED"),
        ]


async def test_two_processes_start_one_run_of_a_day(
    client: Client, db: Database, settings: Settings, clock: ShiftedClock
) -> None:
    shops = [await new_shop(client, db, settings) for _ in range(3)]
    await settle_down(client, shops)
    async with open_runtime(settings, db, clock):
        clock.advance(DAY_S)
        for runs in await settle_down(client, shops):
            assert [run["from"] for run in runs] == [lagged_day(clock, 1), lagged_day(clock, 2)]


class TestSwitchedOff:
    @pytest.fixture
    def settings(self, settings: Settings) -> Settings:
        return settings.model_copy(update={"reconciliation": ReconciliationSettings(daily=False)})

    async def test_no_account_is_reconciled_by_itself(
        self, client: Client, db: Database, settings: Settings, clock: ShiftedClock
    ) -> None:
        shop = await new_shop(client, db, settings)
        clock.advance(DAY_S)
        assert await settle_down(client, [shop]) == [[]]


class TestAFailingProvider:
    @pytest.fixture
    def settings(self, settings: Settings, fake_stripe: FakeStripe) -> Settings:
        fake_stripe.accept_key(STRIPE_KEY)
        stripe = StripeSettings(enabled=True, api_base=fake_stripe.url)
        return daily_settings(settings, stripe=stripe)

    async def test_backs_off_its_own_account_alone_with_a_growing_pause(
        self, client: Client, db: Database, settings: Settings, clock: ShiftedClock, fake_stripe: FakeStripe
    ) -> None:
        fake_stripe.fail_next("GET", "/v1/balance_transactions", *[503] * 100)
        stripe_shop = await _stripe_shop(client, db, settings)
        sandbox_shop = await new_shop(client, db, settings)

        [stripe_runs, sandbox_runs] = await settle_down(client, [stripe_shop, sandbox_shop])
        assert [(run["provider"], run["status"]) for run in stripe_runs] == [("stripe", "FAILED")]
        assert "the provider failed" in stripe_runs[0]["error"]
        assert [(run["provider"], run["status"]) for run in sandbox_runs] == [("sandbox", "COMPLETED")]

        clock.advance(61)  # the first pause: a minute
        [stripe_runs, sandbox_runs] = await settle_down(client, [stripe_shop, sandbox_shop])
        assert [run["status"] for run in stripe_runs] == ["FAILED", "FAILED"]
        assert len(sandbox_runs) == 1

        clock.advance(61)  # the second pause is two minutes: not over yet
        [stripe_runs] = await settle_down(client, [stripe_shop])
        assert len(stripe_runs) == 2
        clock.advance(60)
        [stripe_runs] = await settle_down(client, [stripe_shop])
        assert len(stripe_runs) == 3
        assert {run["from"] for run in stripe_runs} == {lagged_day(clock, 2)}
