"""What learned routing counts of a recovered session: each attempt's outcome at its own provider,
once (docs/routing.md, "One outcome"), and the attempt and recovery metrics."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Any

import httpx
import pytest

from payorch.storage.database import Connection, Database
from payorch.storage.routing_history import PastSession, read_past_sessions
from payorch.values.statuses import Outcome
from tests.fake_stripe import FakeStripe
from tests.helpers import Client, Shop, eventually
from tests.providers.api_support import record as _record
from tests.providers.test_merchant_routing import settings, stripe_sender  # noqa: F401
from tests.providers.test_recovery_way_back import (  # noqa: F401
    DECLINED_CARD,
    _come_back,
    _pay_at_sandbox,
    _session,
    _stripe_checkouts,
    fake_stripe,
    shop,
)
from tests.test_metrics import scrape, value

pytestmark = pytest.mark.filterwarnings("ignore:Use 'content=<...>':DeprecationWarning")


async def _outcomes(db: Database, session_id: str) -> list[tuple[int, str, str]]:
    """The session's recorded outcomes: (attempt number, provider, outcome), by attempt."""

    async def read(conn: Connection) -> list[tuple[int, str, str]]:
        rows = await conn.fetch(
            """SELECT attempt_number, provider_name, outcome FROM routing_outcomes
               WHERE session_id = $1 ORDER BY attempt_number""",
            uuid.UUID(session_id),
        )
        return [tuple(row.values()) for row in rows]

    return await db.autocommit(read)


async def _recovered(
    client: Client,
    shop: Shop,  # noqa: F811
    fake_stripe: FakeStripe,  # noqa: F811
    stripe_sender: httpx.AsyncClient,  # noqa: F811
) -> dict[str, Any]:
    """A session declined at the sandbox, then paid at Stripe; its Stripe payment event delivered
    twice, and the customer's way back taken twice."""
    created = await _session(client, shop, {"maxAttempts": 2})
    back = await _pay_at_sandbox(client, created["checkoutUrl"], DECLINED_CARD)
    await _come_back(client, back)
    await _come_back(client, back)
    (checkout_id,) = _stripe_checkouts(fake_stripe)
    paid = fake_stripe.pay(checkout_id)
    for _ in range(2):
        (answer,) = await fake_stripe.deliver(paid, via=stripe_sender)
        assert answer.status_code == 200

    async def succeeded() -> dict[str, Any] | None:
        found = await _record(client, shop, created["sessionId"])
        return found if found["status"] == "SUCCEEDED" else None

    await eventually(succeeded)
    return created


async def test_a_recovered_session_is_a_failure_at_the_first_provider_and_a_success_at_the_next(
    client: Client,
    shop: Shop,  # noqa: F811
    db: Database,
    fake_stripe: FakeStripe,  # noqa: F811
    stripe_sender: httpx.AsyncClient,  # noqa: F811
) -> None:
    created = await _recovered(client, shop, fake_stripe, stripe_sender)
    assert await _outcomes(db, created["sessionId"]) == [(1, "sandbox", "f"), (2, "stripe", "s")]


async def test_a_recovered_session_moves_the_attempt_and_recovery_metrics_once(
    client: Client,
    shop: Shop,  # noqa: F811
    fake_stripe: FakeStripe,  # noqa: F811
    stripe_sender: httpx.AsyncClient,  # noqa: F811
) -> None:
    await _recovered(client, shop, fake_stripe, stripe_sender)
    _, samples = await scrape(client)
    ended = "payorch_payment_attempts_ended_total"
    assert value(samples, ended, provider="sandbox", outcome="failure") == 1
    assert value(samples, ended, provider="stripe", outcome="success") == 1
    assert value(samples, ended, provider="sandbox", outcome="success") == 0
    assert value(samples, "payorch_sessions_recovered_total") == 1
    outcomes = "payorch_routing_outcomes_total"
    assert value(samples, outcomes, provider="sandbox", payment_method="card", outcome="failure") == 1
    assert value(samples, outcomes, provider="stripe", payment_method="card", outcome="success") == 1
    assert value(samples, "payorch_duplicate_payments_refunded_total") == 0


async def test_a_backtest_reads_a_recovered_session_at_its_first_attempt(
    client: Client,
    shop: Shop,  # noqa: F811
    db: Database,
    fake_stripe: FakeStripe,  # noqa: F811
    stripe_sender: httpx.AsyncClient,  # noqa: F811
) -> None:
    created = await _recovered(client, shop, fake_stripe, stripe_sender)
    read: list[PastSession] = []

    async def each(batch: list[PastSession]) -> None:
        read.extend(batch)

    async def past(conn: Connection) -> None:
        since, until = datetime(2000, 1, 1, tzinfo=UTC), datetime(2100, 1, 1, tzinfo=UTC)
        await read_past_sessions(conn, uuid.UUID(shop.application_id), since, until, 10, 10, each)

    await db.transaction(past)
    (session,) = [found for found in read if found.session_id == created["sessionId"]]
    assert (session.provider, session.outcome) == ("sandbox", Outcome.FAILURE)
