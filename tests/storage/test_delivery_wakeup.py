"""The outbox announces its events as they commit: the database's delivery wake-up rings after the commit of
a transaction that wrote any (once, however many), never for one that wrote none or rolled back;
and one round of the delivery supervisor fans a committed event out and claims its delivery in one
transaction."""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
import trio
import trio.testing

from payorch.config import Settings
from payorch.runtime import open_runtime
from payorch.storage import outbox, webhooks
from payorch.storage.database import Connection, Database
from payorch.storage.wakeup import DeliveryWakeup
from payorch.storage.webhook_deliveries import fan_out_and_claim
from payorch.values.clock import SYSTEM_CLOCK
from tests.helpers import new_application, new_merchant


class Rings:
    """Counts the rings of a wake-up, as its one waiter sees them."""

    def __init__(self) -> None:
        self.count = 0

    async def listen(self, wakeup: DeliveryWakeup) -> None:
        while True:
            await wakeup.wait()
            self.count += 1


async def rings_during(db: Database, *units: Callable[[Connection], Awaitable[None]]) -> int:
    """How often `db`'s delivery wake-up is seen ringing while `units` run, one transaction each."""
    rings = Rings()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(rings.listen, db.delivery_wakeup)
        await trio.testing.wait_all_tasks_blocked()
        for unit in units:
            await db.transaction(unit)
            await trio.testing.wait_all_tasks_blocked()  # the waiter has seen a ring, if any
        nursery.cancel_scope.cancel()
    return rings.count


async def _subscribe(db: Database, application_id: uuid.UUID) -> Any:
    """A webhook configuration of the application, subscribed to `session.completed`."""
    return await db.transaction(
        webhooks.create_webhook,
        application_id=application_id,
        url="https://receiver.example/hooks",
        subscribed_events=["session.completed"],
        secret=b"sealed",
        key_fingerprint="sha256:0",
        most=100,
    )


async def _add(conn: Connection, application_id: uuid.UUID) -> None:
    event_id = f"evt_{uuid.uuid4().hex}"
    await outbox.add_event(
        conn,
        event_id=event_id,
        application_id=application_id,
        session_id=None,
        event_type="session.completed",
        payload={"id": event_id},
    )


@pytest.fixture
async def application_id(db: Database, settings: Settings) -> uuid.UUID:
    """An application, made through the API of a runtime that is stopped again: no supervisor takes
    the events these tests write."""
    async with open_runtime(settings, db) as runtime:
        client = runtime.app.test_client()
        merchant = await new_merchant(client, db, settings)
        return uuid.UUID((await new_application(client, merchant))["id"])


async def test_a_transaction_that_writes_events_rings_once_after_its_commit(
    db: Database, application_id: uuid.UUID
) -> None:
    async def three_events(conn: Connection) -> None:
        for _ in range(3):
            await _add(conn, application_id)

    async def nothing(conn: Connection) -> None:
        await conn.execute("SELECT 1")

    assert await rings_during(db, three_events, nothing) == 1


async def test_a_transaction_rolled_back_does_not_ring(db: Database, application_id: uuid.UUID) -> None:
    class Refused(Exception):
        pass

    async def event_then_error(conn: Connection) -> None:
        await _add(conn, application_id)
        raise Refused

    rings = Rings()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(rings.listen, db.delivery_wakeup)
        with pytest.raises(Refused):
            await db.transaction(event_then_error)
        await trio.testing.wait_all_tasks_blocked()
        nursery.cancel_scope.cancel()
    assert rings.count == 0


async def test_rings_while_no_one_waits_are_kept_as_one(autojump_clock: trio.abc.Clock) -> None:
    wakeup = DeliveryWakeup()
    for _ in range(5):
        wakeup.ring()
    await wakeup.wait()  # at once: it rang
    with trio.move_on_after(60) as waited:
        await wakeup.wait()
    assert waited.cancelled_caught


async def test_one_round_fans_a_committed_event_out_and_claims_its_delivery(
    db: Database, application_id: uuid.UUID
) -> None:
    config = await _subscribe(db, application_id)
    await db.transaction(_add, application_id)

    async def round_(conn: Connection, limit: int = 10) -> tuple[int, list[uuid.UUID]]:
        done = await fan_out_and_claim(
            conn,
            first_wait_s=0,
            fan_out_limit=200,
            limit=limit,
            per_endpoint=4,
            per_merchant=16,
            lease_s=60,
            owner=None,
            now=SYSTEM_CLOCK.now(),
        )
        return done.fanned_out, [delivery.config_id for delivery in done.claimed]

    assert await db.transaction(round_) == (1, [config.id])
    assert await db.transaction(round_) == (0, [])  # a round that finds nothing


async def test_a_round_without_free_slots_fans_out_and_claims_nothing(
    db: Database, application_id: uuid.UUID
) -> None:
    await _subscribe(db, application_id)
    await db.transaction(_add, application_id)
    done = await db.transaction(
        fan_out_and_claim,
        first_wait_s=0,
        fan_out_limit=200,
        limit=0,
        per_endpoint=4,
        per_merchant=16,
        lease_s=60,
        owner=None,
        now=SYSTEM_CLOCK.now(),
    )
    assert (done.fanned_out, done.claimed) == (1, [])


async def test_a_round_commits_without_waiting_for_the_disk_and_nothing_else_does(
    db: Database, application_id: uuid.UUID
) -> None:
    async def round_then_setting(conn: Connection) -> str:
        await fan_out_and_claim(
            conn,
            first_wait_s=0,
            fan_out_limit=200,
            limit=10,
            per_endpoint=4,
            per_merchant=16,
            lease_s=60,
            owner=None,
            now=SYSTEM_CLOCK.now(),
        )
        return str(await conn.fetchval("SHOW synchronous_commit"))

    async def setting(conn: Connection) -> str:
        return str(await conn.fetchval("SHOW synchronous_commit"))

    assert await db.transaction(round_then_setting) == "off"
    assert await db.transaction(setting) == "on"  # the setting ended with the round's transaction
