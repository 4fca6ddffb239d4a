"""What checkout creations cost a provider's score where sessions are routed: the application's
actor reads its accounts' provider-call health (their creations' failures and time) into every
decision, so evaluate shows a provider whose creation failed lower (docs/routing.md, "Checkout
creations")."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
import trio

from payorch.config import Settings
from payorch.engine.context import account_of
from payorch.engine.routing.decision import CreationFigures, creation_factor
from payorch.engine.routing.success_rates import PRIOR
from payorch.http.services import PayorchApp
from payorch.storage import provider_configs
from payorch.storage.database import Database
from tests.helpers import Client, Shop, new_shop, post_json, session_body


@pytest.fixture
async def shop(client: Client, db: Database, settings: Settings) -> Shop:
    return await new_shop(client, db, settings)


async def _sandbox_score(client: Client, shop: Shop) -> Any:
    path = f"/api/v1/applications/{shop.application_id}/routing/evaluate"
    answer = await post_json(client, path, session_body(), shop.merchant.headers)
    assert answer.status_code == 200
    (place,) = (await answer.get_json())["ranking"]
    assert place["provider"] == "sandbox"
    return place["score"]


async def test_a_failed_and_slow_checkout_creation_lowers_the_providers_score(
    app: PayorchApp, client: Client, db: Database, shop: Shop
) -> None:
    assert await _sandbox_score(client, shop) == round(PRIOR.upper, 4)  # never called: no cost
    config = await db.autocommit(
        provider_configs.get_provider_config, uuid.UUID(shop.application_id), "sandbox"
    )
    assert config is not None
    health = app.services.context.health
    # One creation that failed after 2 s: its smoothed success falls to 0.8, its time is 2 s.
    health.record_failure(account_of(config), 2.0, trio.current_time(), provider_wide=True)
    factor = creation_factor(CreationFigures(success_rate=0.8, latency_s=2.0))
    assert factor == pytest.approx((1 - 0.25 * 0.2) * (1 - 0.005 * 2))
    assert await _sandbox_score(client, shop) == pytest.approx(round(PRIOR.upper * factor, 4), abs=1e-4)
