"""The sandbox's settlement lag: a payment payorch recorded is EXPECTED until the day it settles,
then MATCHED."""

from __future__ import annotations

from datetime import UTC, timedelta

import pytest

from payorch.config import ProviderSettings, SandboxSettings, Settings
from payorch.storage.database import Database
from tests.clock import ShiftedClock
from tests.helpers import Client, Shop, new_shop
from tests.reconciliation.test_sandbox_runs import outcomes, paid_session, reconcile


@pytest.fixture
def settings(settings: Settings) -> Settings:
    """A lag of one day, and access tokens that outlive the day the test moves time by."""
    return settings.model_copy(
        update={
            "providers": ProviderSettings(sandbox=SandboxSettings(settlement_lag_days=1)),
            "auth": settings.auth.model_copy(update={"jwt_ttl_s": 3 * 24 * 3600}),
        }
    )


@pytest.fixture
async def shop(client: Client, db: Database, settings: Settings) -> Shop:
    return await new_shop(client, db, settings)


async def test_a_payment_is_expected_within_the_lag_and_matched_after_it(
    client: Client, shop: Shop, clock: ShiftedClock
) -> None:
    session_id = await paid_session(client, shop)
    today = clock.now().astimezone(UTC).date()
    tomorrow = today + timedelta(days=1)
    run = await reconcile(client, shop, today.isoformat(), tomorrow.isoformat())
    [item] = outcomes(run)["EXPECTED"]
    assert (item["sessionId"], item["gross"]) == (session_id, None)
    clock.advance(24 * 3600)
    later = await reconcile(client, shop, tomorrow.isoformat())
    [matched] = outcomes(later)["MATCHED"]
    assert (matched["sessionId"], matched["settledOn"]) == (session_id, tomorrow.isoformat())
