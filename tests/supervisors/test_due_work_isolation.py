"""Nothing one merchant does delays another merchant's session expiry or refund submission, fails
the supervisors that do them, or turns `/readyz`.

Merchant A misbehaves: its application's actor is busy with a full mailbox (its own requests), or
its provider hangs on every call. Merchant B's due work is done all the same, at once; A's waits
for a later round, alone; the supervisor never restarts and `/readyz` stays 200.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import timedelta
from typing import Any
from urllib.parse import urlsplit

import pytest
import trio

from payorch.config import Settings
from payorch.engine.actors import ApplicationActor, Reply
from payorch.engine.context import Context
from payorch.runtime import Runtime
from payorch.storage.database import Connection, Database
from payorch.values.errors import ServiceBusy
from tests import fake_stripe as stripe_fake
from tests.clock import ShiftedClock
from tests.fake_stripe import FakeStripe, ScriptedFailure
from tests.helpers import (
    Client,
    Shop,
    create_session,
    eventually,
    new_api_key,
    new_application,
    new_merchant,
    new_shop,
    post_json,
    session_body,
)

pytestmark = pytest.mark.filterwarnings("ignore:Use 'content=<...>':DeprecationWarning")

fake_stripe = stripe_fake.fake_stripe
STRIPE_KEY = "sk_test_51SlowShop0123456789abcdef"
MAILBOX = 4
SLOTS = 4
PER_MERCHANT = 2
PROVIDER_TIMEOUT_S = 30.0  # longer than any test here: a hung call holds its slot throughout
OLD_BATCH = 200  # what the expiry supervisor used to take, and await whole, per round


@pytest.fixture
def settings(settings: Settings, fake_stripe: FakeStripe) -> Settings:
    fake_stripe.accept_key(STRIPE_KEY)
    providers = settings.providers.model_copy(
        update={
            "stripe": settings.providers.stripe.model_copy(
                update={"enabled": True, "api_base": fake_stripe.url}
            ),
            # The sandbox settles refunds late: a refund stays PENDING while the test looks at it.
            "sandbox": settings.providers.sandbox.model_copy(update={"refund_delay_ms": 600_000}),
        }
    )
    return settings.model_copy(
        update={
            "engine": settings.engine.model_copy(
                update={"mailbox_size": MAILBOX, "provider_timeout_s": PROVIDER_TIMEOUT_S}
            ),
            "limits": settings.limits.model_copy(
                update={"background_slots": SLOTS, "background_per_merchant": PER_MERCHANT}
            ),
            "providers": providers,
        }
    )


@dataclass(frozen=True)
class _Hold:
    """Keeps an application's actor busy until released, as a merchant's slow requests would."""

    released: trio.Event

    async def run(self, actor: ApplicationActor[Context], reply: Reply[None]) -> None:
        await self.released.wait()
        reply.send(None)


@contextlib.asynccontextmanager
async def full_mailbox(runtime: Runtime, application_id: str) -> AsyncIterator[None]:
    """The application's actor busy and its mailbox full (a further request is ServiceBusy) until
    the block ends."""
    actors = runtime.services.actors
    application = uuid.UUID(application_id)
    released = trio.Event()

    async def ask() -> None:
        with contextlib.suppress(ServiceBusy):
            await actors.ask(application, _Hold(released))

    async with trio.open_nursery() as nursery:

        async def full() -> bool:
            if actors.mailbox_depths().get(application, 0) >= MAILBOX:
                return True
            nursery.start_soon(ask)  # one more, until what is asked waits in the mailbox
            return False

        await eventually(full)
        with pytest.raises(ServiceBusy):
            await actors.ask(application, _Hold(released))
        try:
            yield
        finally:
            released.set()


_READ = {
    "checkout_sessions": "SELECT * FROM checkout_sessions WHERE id = $1",
    "refunds": "SELECT * FROM refunds WHERE id = $1",
}


async def _status(db: Database, table: str, row_id: str) -> dict[str, Any]:
    async def read(conn: Connection) -> dict[str, Any]:
        row = await conn.fetchrow(_READ[table], uuid.UUID(row_id))
        assert row is not None
        return dict(row.items())

    return await db.autocommit(read)


async def _expired(db: Database, session_id: str) -> bool:
    return (await _status(db, "checkout_sessions", session_id))["status"] == "FAILED"


async def _created(client: Client, shop: Shop) -> str:
    response = await create_session(client, shop, f"s-{uuid.uuid4()}")
    assert response.status_code == 201, await response.get_data(as_text=True)
    return str((await response.get_json())["sessionId"])


async def assert_node_healthy(client: Client, runtime: Runtime, supervisor: str) -> None:
    assert runtime.services.supervisors.restarts[supervisor] == 0
    assert runtime.services.supervisors.running[supervisor]
    assert (await client.get("/readyz")).status_code == 200


async def test_a_full_mailbox_delays_only_its_own_applications_expiry(
    client: Client, db: Database, settings: Settings, runtime: Runtime, clock: ShiftedClock
) -> None:
    shop_a, shop_b = await new_shop(client, db, settings), await new_shop(client, db, settings)
    session_a, session_b = await _created(client, shop_a), await _created(client, shop_b)
    async with full_mailbox(runtime, shop_a.application_id):
        clock.advance(settings.sessions.ttl_s + 1)
        await eventually(lambda: _expired(db, session_b), timeout_s=5)
        assert not await _expired(db, session_a)  # its actor is busy: it waits for a later round
        await assert_node_healthy(client, runtime, "session expiry")
    await eventually(lambda: _expired(db, session_a), timeout_s=5)  # retried once there is room
    await assert_node_healthy(client, runtime, "session expiry")


async def _stripe_shop(client: Client, db: Database, settings: Settings) -> Shop:
    merchant = await new_merchant(client, db, settings)
    application = await new_application(client, merchant)
    linked = await client.post(
        f"/api/v1/applications/{application['id']}/providers",
        json={"name": "stripe", "paymentMethods": ["card"], "credentials": {"apiKey": STRIPE_KEY}},
        headers=merchant.headers,
    )
    assert linked.status_code == 201, await linked.get_data(as_text=True)
    key = await new_api_key(client, merchant, application["id"])
    return Shop(merchant=merchant, application_id=application["id"], api_key=key["key"])


async def _stripe_backlog(db: Database, shop: Shop, count: int, clock: ShiftedClock) -> None:
    """`count` PENDING Stripe sessions of the shop, past their expiry an hour ago, oldest first."""
    since = clock.now() - timedelta(hours=1)

    async def insert(conn: Connection) -> None:
        await conn.executemany(
            """INSERT INTO checkout_sessions (id, application_id, order_reference, amount_minor, currency,
                                             status, payment_method, customer, expires_at, provider_name,
                                             provider_reference)
               VALUES ($1, $2, 'order', 100, 'PLN', 'PENDING', 'card', '{}', $3, 'stripe', $4)""",
            [
                (uuid.uuid4(), uuid.UUID(shop.application_id), since + timedelta(seconds=i), f"cs_slow_{i}")
                for i in range(count)
            ],
        )

    await db.transaction(insert)


async def test_a_hanging_provider_holds_only_its_merchants_share_of_the_expiry_slots(
    client: Client,
    db: Database,
    settings: Settings,
    runtime: Runtime,
    clock: ShiftedClock,
    fake_stripe: FakeStripe,
) -> None:
    # Merchant A's Stripe hangs on every expiry: a backlog of A's sessions, all due before B's.
    fake_stripe.fail_next(
        "POST", "/v1/checkout/sessions/cs_slow_", *[ScriptedFailure(delay_s=60)] * OLD_BATCH
    )
    shop_a, shop_b = await _stripe_shop(client, db, settings), await new_shop(client, db, settings)
    session_b = await _created(client, shop_b)
    await _stripe_backlog(db, shop_a, OLD_BATCH, clock)

    clock.advance(settings.sessions.ttl_s + 1)
    # B's session expires well within a provider's timeout, while every call A's provider was sent
    # still hangs (the old loop awaited A's whole batch, each call for the whole timeout).
    await eventually(lambda: _expired(db, session_b), timeout_s=5)

    def hanging() -> int:
        return len([r for r in fake_stripe.requests if r.path.startswith("/v1/checkout/sessions/cs_slow_")])

    async def share_taken() -> bool:
        return hanging() >= PER_MERCHANT

    await eventually(share_taken, timeout_s=5)
    assert hanging() == PER_MERCHANT  # A holds its share of the slots, no more
    await assert_node_healthy(client, runtime, "session expiry")


async def _paid(client: Client, db: Database, shop: Shop) -> str:
    response = await create_session(client, shop, f"pay-{uuid.uuid4()}", session_body())
    created = await response.get_json()
    await client.post(urlsplit(created["checkoutUrl"]).path, form={"card_number": "4242424242424242"})

    async def succeeded() -> bool:
        return (await _status(db, "checkout_sessions", created["sessionId"]))["status"] == "SUCCEEDED"

    await eventually(succeeded)
    return str(created["sessionId"])


async def _unacknowledged_refund(client: Client, db: Database, shop: Shop) -> str:
    """A refund as if the provider had not acknowledged it, its next submission an hour away."""
    session_id = await _paid(client, db, shop)
    response = await post_json(
        client, f"/api/v1/sessions/{session_id}/refunds", {}, {**shop.headers, "Idempotency-Key": "r1"}
    )
    assert response.status_code == 201, await response.get_data(as_text=True)
    refund_id = str((await response.get_json())["refundId"])

    async def unacknowledge(conn: Connection) -> None:
        await conn.execute(
            """UPDATE refunds SET provider_reference = NULL, submit_claimed_by = NULL,
                      next_submit_at = now() + interval '1 hour' WHERE id = $1""",
            uuid.UUID(refund_id),
        )

    await db.transaction(unacknowledge)
    return refund_id


async def _due_now(db: Database, clock: ShiftedClock, *refund_ids: str) -> None:
    async def due(conn: Connection) -> None:
        await conn.execute(
            "UPDATE refunds SET next_submit_at = $2 WHERE id = ANY($1::uuid[])",
            [uuid.UUID(refund_id) for refund_id in refund_ids],
            clock.now() - timedelta(seconds=1),
        )

    await db.transaction(due)


async def _submitted(db: Database, refund_id: str) -> bool:
    return (await _status(db, "refunds", refund_id))["provider_reference"] is not None


async def test_a_full_mailbox_delays_only_its_own_applications_refund_submissions(
    client: Client, db: Database, settings: Settings, runtime: Runtime, clock: ShiftedClock
) -> None:
    shop_a, shop_b = await new_shop(client, db, settings), await new_shop(client, db, settings)
    refund_a = await _unacknowledged_refund(client, db, shop_a)
    refund_b = await _unacknowledged_refund(client, db, shop_b)
    async with full_mailbox(runtime, shop_a.application_id):
        await _due_now(db, clock, refund_a, refund_b)
        await eventually(lambda: _submitted(db, refund_b), timeout_s=5)
        assert not await _submitted(db, refund_a)  # its actor is busy: it waits for a later round
        assert (await _status(db, "refunds", refund_a))["submit_claimed_by"] is None  # handed back
        await assert_node_healthy(client, runtime, "refund submission")
    await eventually(lambda: _submitted(db, refund_a), timeout_s=5)  # retried once there is room
    await assert_node_healthy(client, runtime, "refund submission")
