"""What a candidate's recovery policy would have changed, counted by the API's backtest over real
attempts (docs/routing.md, "Recovery in a backtest"): a session declined at the sandbox and paid at
Stripe, a decline no attempt followed; and what the history cannot tell."""

from __future__ import annotations

import uuid
from typing import Any

import httpx
import pytest

from payorch.jsonexact import loads_exact
from payorch.storage.database import Connection, Database
from tests.fake_stripe import FakeStripe
from tests.helpers import Client, Shop, eventually, post_json
from tests.http.test_routing_backtest import RECOVERY_COUNTS
from tests.providers.test_merchant_routing import settings, stripe_sender  # noqa: F401
from tests.providers.test_recovery_outcomes import _recovered
from tests.providers.test_recovery_way_back import (  # noqa: F401
    DECLINED_CARD,
    SANDBOX_FIRST,
    _pay_at_sandbox,
    _session,
    fake_stripe,
    shop,
)

pytestmark = pytest.mark.filterwarnings("ignore:Use 'content=<...>':DeprecationWarning")


async def _recovery(client: Client, shop: Shop, candidate: dict[str, Any]) -> dict[str, Any]:  # noqa: F811
    """The recovery counts of a backtest of `candidate`."""
    response = await post_json(
        client,
        f"/api/v1/applications/{shop.application_id}/routing/backtest",
        {"routing": candidate},
        shop.merchant.headers,
    )
    assert response.status_code == 200, await response.get_data(as_text=True)
    answer: dict[str, Any] = loads_exact(await response.get_data())
    recovery: dict[str, Any] = answer["recovery"]
    return recovery


def _counts(**found: int) -> dict[str, int]:
    return {name: found.get(name, 0) for name in RECOVERY_COUNTS}


@pytest.fixture
async def recovered(
    client: Client,
    shop: Shop,  # noqa: F811
    fake_stripe: FakeStripe,  # noqa: F811
    stripe_sender: httpx.AsyncClient,  # noqa: F811
) -> dict[str, Any]:
    """The shop's history: one session declined at the sandbox (`card_declined`), paid at Stripe."""
    return await _recovered(client, shop, fake_stripe, stripe_sender)


async def test_a_candidate_retrying_where_the_history_recovered_counts_the_session_recovered(
    client: Client,
    shop: Shop,  # noqa: F811
    recovered: dict[str, Any],
) -> None:
    candidate = {"default": SANDBOX_FIRST, "recovery": {"maxAttempts": 2}}
    assert await _recovery(client, shop, candidate) == _counts(retried=1, recovered=1)


async def test_a_stricter_candidate_counts_what_it_would_no_longer_retry_nor_recover(
    client: Client,
    shop: Shop,  # noqa: F811
    recovered: dict[str, Any],
) -> None:
    lost = _counts(noLongerRetried=1, noLongerRecovered=1)
    assert await _recovery(client, shop, {"default": SANDBOX_FIRST}) == lost
    never = {"maxAttempts": 2, "neverRetry": ["card_declined"]}
    assert await _recovery(client, shop, {"default": SANDBOX_FIRST, "recovery": never}) == lost


async def _first_outcome(db: Database, session_id: str) -> str | None:
    async def read(conn: Connection) -> str | None:
        found: str | None = await conn.fetchval(
            "SELECT outcome FROM routing_outcomes WHERE session_id = $1 AND attempt_number = 1",
            uuid.UUID(session_id),
        )
        return found

    return await db.autocommit(read)


async def test_a_decline_no_attempt_followed_is_one_the_history_cannot_tell(
    client: Client,
    shop: Shop,  # noqa: F811
    db: Database,
) -> None:
    # Declined at the sandbox under one attempt: payorch kept no decline code, and Stripe was never
    # tried, so whether a candidate with two attempts retries it, and what it gets, is unknown.
    created = await _session(client, shop)
    await _pay_at_sandbox(client, created["checkoutUrl"], DECLINED_CARD)
    assert await eventually(lambda: _first_outcome(db, created["sessionId"])) == "f"
    candidate = {"default": SANDBOX_FIRST, "recovery": {"maxAttempts": 2}}
    assert await _recovery(client, shop, candidate) == _counts(declinedWithoutCode=1)
    assert await _recovery(client, shop, {"default": SANDBOX_FIRST}) == _counts()
