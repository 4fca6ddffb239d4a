"""What learned routing counts of a recovered session: each attempt's outcome at its own provider,
once (docs/routing.md, "One outcome"), the same whatever order its events are applied in, and the
attempt and recovery metrics."""

from __future__ import annotations

import itertools
import uuid
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import httpx
import pytest

from payorch.engine.payments.events import apply_session_event
from payorch.engine.payments.provider_events import ApplyProviderEvent
from payorch.engine.payments.states import SessionEvent
from payorch.http.services import PayorchApp
from payorch.providers.base import EventKind, ProviderEvent
from payorch.storage import sessions
from payorch.storage.database import Connection, Database
from payorch.storage.next_attempt import AttemptEnding, NextAttempt, open_next_attempt
from payorch.storage.routing_history import PastSession, read_past_sessions
from payorch.values.statuses import AttemptStatus, FailureReason, Outcome
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


# --- One outcome, whatever the order ---------------------------------------------------------------

Step = Callable[[Connection], Awaitable[object]]


def _steps(app: PayorchApp, shop: Shop, session: sessions.CheckoutSession) -> dict[str, Step]:  # noqa: F811
    """What can happen to the session's first attempt, each applied as payorch applies it: the
    sandbox's decline (`d`) or payment (`s`) of its checkout, the customer coming back canceled and
    the next attempt opening at Stripe (`c`), the session's expiry (`e`)."""
    application_id, checkout = uuid.UUID(shop.application_id), session.provider_reference
    assert session.expires_at is not None and checkout is not None
    now = session.expires_at + timedelta(seconds=1)
    metrics = app.services.context.metrics

    def provider_event(kind: EventKind, reason: FailureReason | None = None) -> Step:
        event = ProviderEvent(f"evt_{uuid.uuid4().hex}", kind, session.id, None, checkout, reason)

        async def apply(conn: Connection) -> object:
            return await ApplyProviderEvent("sandbox", event)._apply(conn, application_id, metrics, now)

        return apply

    async def cancel(conn: Connection) -> object:
        return await open_next_attempt(
            conn,
            application_id=application_id,
            session_id=session.id,
            ending=AttemptEnding("sandbox", checkout, AttemptStatus.CANCELED),
            next_attempt=NextAttempt(
                "stripe",
                f"cs_test_{uuid.uuid4().hex}",
                "https://checkout.stripe.test/next",
                Decimal("0.5"),
                None,
                "recovery",
                1,
            ),
            now=now,
        )

    async def expire(conn: Connection) -> object:
        return await apply_session_event(
            conn,
            application_id=application_id,
            session_id=session.id,
            event=SessionEvent.EXPIRED,
            metrics=metrics,
            now=now,
        )

    return {
        "d": provider_event(EventKind.PAYMENT_DECLINED, FailureReason.CARD_DECLINED),
        "s": provider_event(EventKind.PAYMENT_SUCCEEDED),
        "c": cancel,
        "e": expire,
    }


@pytest.mark.parametrize(
    ("happened", "outcome"),
    [("dsce", "s"), ("dce", "f"), ("ce", "a")],
    ids=["paid-declined-canceled-expired", "declined-canceled-expired", "canceled-expired"],
)
async def test_the_first_attempts_outcome_is_the_same_in_every_order_of_its_events(
    app: PayorchApp,
    client: Client,
    shop: Shop,  # noqa: F811
    db: Database,
    happened: str,
    outcome: str,
) -> None:
    found = {}
    for order in itertools.permutations(happened):
        created = await _session(client, shop, {"maxAttempts": 2})
        session = await db.autocommit(sessions.get_session, uuid.UUID(created["sessionId"]))
        assert session is not None
        steps = _steps(app, shop, session)
        for step in order:
            await db.transaction(steps[step])
        first, *_ = await _outcomes(db, created["sessionId"])
        found["".join(order)] = first
    assert found == {order: (1, "sandbox", outcome) for order in found}
