"""Never paid twice, counted: many sessions driven at random through declines, gave-ups, returns
repeated and racing, payments at the next provider and late successes of the first attempt (the
sandbox's, after its checkout was closed), then every provider checkout paid is matched against
what payorch recorded: at most one attempt open per session, and no payment that is neither the
session's one payment nor refunded in full by payorch."""

from __future__ import annotations

import random
import uuid
from typing import Any

import httpx
import pytest
import trio

from payorch.config import Settings
from payorch.storage.database import Connection, Database
from tests import fake_stripe as stripe_fake
from tests.fake_stripe import FakeStripe
from tests.helpers import Client, Shop, eventually, put_routing
from tests.providers.api_support import created as _created
from tests.providers.api_support import events as _events
from tests.providers.api_support import record as _record
from tests.providers.test_late_attempt_payments import _sandbox_paid_late
from tests.providers.test_merchant_routing import settings, stripe_sender  # noqa: F401
from tests.providers.test_recovery_way_back import (
    DECLINED_CARD,
    FAILURE,
    PAYING_CARD,
    SANDBOX_FIRST,
    SUCCESS,
    _come_back,
    _pay_at_sandbox,
    shop,  # noqa: F401
)

pytestmark = pytest.mark.filterwarnings("ignore:Use 'content=<...>':DeprecationWarning")
fake_stripe = stripe_fake.fake_stripe

SESSIONS = 100
AT_ONCE = 10


async def _drive(
    rng: random.Random,
    client: Client,
    db: Database,
    settings: Settings,  # noqa: F811
    shop: Shop,  # noqa: F811
    fake: FakeStripe,
    sender: httpx.AsyncClient,
) -> str:
    """One session's customer, and its providers, acting at random: the session's id."""
    created = await _created(
        client, shop, f"key-{uuid.uuid4()}", redirectUrls={"success": SUCCESS, "failure": FAILURE}
    )
    session_id = created["sessionId"]
    back = f"/checkout/{session_id}/return?attempt=1"
    first = rng.choice(["decline", "decline", "pay", "give_up"])
    if first != "give_up":
        back = await _pay_at_sandbox(
            client, created["checkoutUrl"], PAYING_CARD if first == "pay" else DECLINED_CARD
        )
    async with trio.open_nursery() as nursery:  # returns repeated, some at once
        for _ in range(rng.randint(1, 3)):
            nursery.start_soon(_come_back, client, back)
    late = rng.random() < 0.5
    late_first = rng.random() < 0.5
    if late and late_first:
        await _paid_late(client, db, settings, shop, session_id, rng)
    record = await _record(client, shop, session_id)
    if record["providerName"] == "stripe":
        checkout_id = await _open_reference(db, session_id)
        next_step = rng.choice(["pay", "pay", "decline", "give_up", "nothing"])
        if next_step == "pay" and fake.checkout(checkout_id)["status"] == "open":
            await fake.deliver(fake.pay(checkout_id), via=sender)
        elif next_step == "decline" and fake.checkout(checkout_id)["status"] == "open":
            await fake.deliver(fake.decline(checkout_id), via=sender)
        elif next_step == "give_up":
            await _come_back(client, f"/checkout/{session_id}/return?attempt=2")
    if late and not late_first:
        await _paid_late(client, db, settings, shop, session_id, rng)
    return str(session_id)


async def _paid_late(
    client: Client,
    db: Database,
    settings: Settings,  # noqa: F811
    shop: Shop,  # noqa: F811
    session_id: str,
    rng: random.Random,
) -> None:
    """The first attempt's checkout paid after all, said once or twice, when that attempt has ended."""
    if len((await _record(client, shop, session_id))["attempts"]) < 2:
        return
    event_id = f"evt_sbx_late_{uuid.uuid4().hex}"
    for _ in range(rng.randint(1, 2)):
        answer = await _sandbox_paid_late(client, db, settings, shop, session_id, event_id)
        assert answer.status_code == 200


async def _open_reference(db: Database, session_id: str) -> str:
    async def read(conn: Connection) -> str:
        return str(
            await conn.fetchval(
                "SELECT provider_reference FROM checkout_sessions WHERE id = $1", uuid.UUID(session_id)
            )
        )

    return await db.autocommit(read)


async def _payments(db: Database, fake: FakeStripe, session_id: str) -> set[str]:
    """The checkouts of the session that the providers say were paid."""

    async def read(conn: Connection) -> tuple[set[str], set[str]]:
        sandbox = await conn.fetch(
            "SELECT id FROM sandbox_checkouts WHERE client_reference = $1 AND status = 'paid'", session_id
        )
        references = await conn.fetch(
            """SELECT provider_reference FROM payment_attempts
               WHERE session_id = $1 AND provider_name = 'stripe'
               UNION SELECT provider_reference FROM checkout_sessions
               WHERE id = $1 AND provider_name = 'stripe'""",
            uuid.UUID(session_id),
        )
        return {row["id"] for row in sandbox}, {row["provider_reference"] for row in references}

    sandbox, stripe = await db.autocommit(read)
    return sandbox | {ref for ref in stripe if fake.checkout(ref)["payment_status"] == "paid"}


async def _refunded_attempts(db: Database, session_id: str) -> dict[str, int]:
    """Each refunded duplicate's checkout, and the amount refunded."""

    async def read(conn: Connection) -> dict[str, int]:
        rows = await conn.fetch(
            """SELECT a.provider_reference, r.amount_minor FROM payment_attempts a
               JOIN refunds r ON r.id = a.refund_id
               WHERE a.session_id = $1 AND a.status = 'DUPLICATE_REFUNDED' AND r.status <> 'FAILED'""",
            uuid.UUID(session_id),
        )
        return {row["provider_reference"]: row["amount_minor"] for row in rows}

    return await db.autocommit(read)


async def _check(
    client: Client,
    db: Database,
    shop: Shop,  # noqa: F811
    fake: FakeStripe,
    session_id: str,
) -> dict[str, Any]:
    paid = await _payments(db, fake, session_id)

    async def settled() -> dict[str, Any] | None:  # the sandbox's own payment event is on its way
        record = await _record(client, shop, session_id)
        return record if not paid or record["status"] == "SUCCEEDED" else None

    record = await eventually(settled)
    statuses = [attempt["status"] for attempt in record["attempts"]]
    assert [attempt["number"] for attempt in record["attempts"]] == list(range(1, len(statuses) + 1))
    assert statuses.count("OPEN") <= 1
    assert statuses.count("SUCCEEDED") == (1 if record["status"] == "SUCCEEDED" else 0)
    refunded = await _refunded_attempts(db, session_id)
    assert len(paid) == statuses.count("SUCCEEDED") + len(refunded), (paid, statuses, refunded)
    assert set(refunded) <= paid
    types = [event["type"] for event in await _events(db, session_id)]
    assert types.count("session.completed") == statuses.count("SUCCEEDED")
    return {"paid": len(paid), "refunded": len(refunded), "attempts": len(statuses)}


async def test_many_sessions_at_random_never_pay_twice_nor_open_two_attempts(
    client: Client,
    db: Database,
    settings: Settings,  # noqa: F811
    shop: Shop,  # noqa: F811
    fake_stripe: FakeStripe,
    stripe_sender: httpx.AsyncClient,  # noqa: F811
) -> None:
    await put_routing(client, shop, {"default": SANDBOX_FIRST, "recovery": {"maxAttempts": 2}})
    rng = random.Random(43)
    seeds = [rng.random() for _ in range(SESSIONS)]
    session_ids: list[str] = []

    async def one(seed: float) -> None:
        session_ids.append(
            await _drive(random.Random(seed), client, db, settings, shop, fake_stripe, stripe_sender)
        )

    for start in range(0, SESSIONS, AT_ONCE):
        async with trio.open_nursery() as nursery:
            for seed in seeds[start : start + AT_ONCE]:
                nursery.start_soon(one, seed)
    counted = [await _check(client, db, shop, fake_stripe, session_id) for session_id in session_ids]
    assert len(counted) == SESSIONS
    # The draw reaches every case the invariants are about.
    assert sum(1 for c in counted if c["attempts"] == 2) > 10
    assert sum(c["refunded"] for c in counted) > 0
    assert sum(1 for c in counted if c["paid"] == 1) > 10
