"""Evaluate shows the attempts a session would get under the application's recovery policy, across
two providers (the sandbox, and Stripe at its fake): the decision's first provider for the
decision's reason, then the next for `recovery`, never one twice, at most `maxAttempts`."""

from __future__ import annotations

from typing import Any

import pytest

from payorch.config import Settings
from payorch.storage.database import Database
from tests import fake_stripe as stripe_fake
from tests.fake_stripe import FakeStripe
from tests.helpers import Client, Shop, post_json, put_routing, session_body
from tests.providers.test_merchant_routing import _shop, settings  # noqa: F401 - Stripe at its fake

# The Stripe SDK's HTTPXClient hands httpx the encoded form as `data=`, which httpx deprecates.
pytestmark = pytest.mark.filterwarnings("ignore:Use 'content=<...>':DeprecationWarning")
fake_stripe = stripe_fake.fake_stripe

PRIORITY = {"type": "priority", "providers": ["stripe", "sandbox"]}


@pytest.fixture
async def shop(client: Client, db: Database, settings: Settings, fake_stripe: FakeStripe) -> Shop:  # noqa: F811
    return await _shop(client, db, settings, stripe_methods=("card",))


async def _attempts(client: Client, shop: Shop, recovery: dict[str, Any] | None, **session: Any) -> Any:
    document: dict[str, Any] = {"default": PRIORITY}
    if recovery is not None:
        document["recovery"] = recovery
    await put_routing(client, shop, document)
    path = f"/api/v1/applications/{shop.application_id}/routing/evaluate"
    response = await post_json(client, path, session_body(**session), shop.merchant.headers)
    assert response.status_code == 200, await response.get_data(as_text=True)
    answer = await response.get_json()
    assert answer["selectedProvider"] == (answer["attempts"][0]["provider"] if answer["attempts"] else None)
    return answer["attempts"]


async def test_evaluate_shows_the_attempts_in_order_the_next_ones_for_recovery(
    client: Client, shop: Shop
) -> None:
    assert await _attempts(client, shop, {"maxAttempts": 2}) == [
        {"provider": "stripe", "reason": "rule"},
        {"provider": "sandbox", "reason": "recovery"},
    ]


async def test_evaluate_shows_no_more_attempts_than_providers_never_one_twice(
    client: Client, shop: Shop
) -> None:
    assert await _attempts(client, shop, {"maxAttempts": 5}) == [
        {"provider": "stripe", "reason": "rule"},
        {"provider": "sandbox", "reason": "recovery"},
    ]


async def test_evaluate_without_a_recovery_policy_shows_one_attempt(client: Client, shop: Shop) -> None:
    assert await _attempts(client, shop, None) == [{"provider": "stripe", "reason": "rule"}]


async def test_evaluate_leaves_out_a_provider_that_cannot_take_the_session(
    client: Client, shop: Shop
) -> None:
    # Stripe is linked for cards only: a BLIK session has one provider to try.
    assert await _attempts(client, shop, {"maxAttempts": 3}, method="blik") == [
        {"provider": "sandbox", "reason": "rule"}
    ]
