"""The actor's lanes on a real database: a command about one session waits for nothing of another
session's, while PostgreSQL's row lock still orders what two writers do to one session."""

from __future__ import annotations

import asyncio
import uuid
from dataclasses import dataclass, field

import trio

from payorch.config import Settings
from payorch.engine.payments.provider_events import ApplyProviderEvent
from payorch.providers.base import EventKind, ProviderEvent
from payorch.runtime import Runtime
from payorch.storage import sessions
from payorch.storage.database import Connection, Database
from tests.helpers import Client, create_session, eventually, new_shop


@dataclass
class HeldLock:
    """A transaction on the database's own loop holding one session's row lock until released."""

    loop: asyncio.AbstractEventLoop | None = None
    release: asyncio.Event | None = None
    done: trio.Event = field(default_factory=trio.Event)

    async def hold(self, conn: Connection, session_id: uuid.UUID) -> None:
        await sessions.lock_session(conn, session_id)
        self.loop, self.release = asyncio.get_running_loop(), asyncio.Event()
        await self.release.wait()

    def let_go(self) -> None:
        assert self.loop is not None and self.release is not None
        self.loop.call_soon_threadsafe(self.release.set)


def _paid(session_id: str, reference: str) -> ApplyProviderEvent:
    event = ProviderEvent(
        id=f"evt-{uuid.uuid4()}",
        kind=EventKind.PAYMENT_SUCCEEDED,
        session_id=uuid.UUID(session_id),
        checkout_reference=reference,
    )
    return ApplyProviderEvent("sandbox", event)


async def _status(db: Database, session_id: str) -> str | None:
    session = await db.autocommit(sessions.get_session, uuid.UUID(session_id))
    assert session is not None
    return str(session.status)


async def test_a_provider_event_waiting_on_one_sessions_lock_holds_no_other_sessions_event(
    client: Client, db: Database, settings: Settings, runtime: Runtime
) -> None:
    shop = await new_shop(client, db, settings)
    created = [await (await create_session(client, shop, key)).get_json() for key in ("a", "b")]
    first, second = (body["sessionId"] for body in created)
    references = {}
    for session_id in (first, second):
        session = await db.autocommit(sessions.get_session, uuid.UUID(session_id))
        assert session is not None and session.provider_reference is not None
        references[session_id] = session.provider_reference
    application = uuid.UUID(shop.application_id)
    actors = runtime.services.actors
    lock = HeldLock()

    async def hold() -> None:
        await db.transaction(lock.hold, uuid.UUID(first))
        lock.done.set()

    async with trio.open_nursery() as tasks:
        tasks.start_soon(hold)
        await eventually(lambda: _ready(lock))
        # The first session's event waits for the lock another writer holds ...
        tasks.start_soon(actors.ask, application, _paid(first, references[first]))
        await trio.testing.wait_all_tasks_blocked()
        # ... and the second session's is applied meanwhile (a deadline, not a measurement: before
        # lanes it waited behind the first and this failed).
        with trio.fail_after(10):
            assert await actors.ask(application, _paid(second, references[second]))
        assert await _status(db, first) == "PENDING"
        lock.let_go()
    assert await _status(db, first) == "SUCCEEDED"
    assert await _status(db, second) == "SUCCEEDED"


async def _ready(lock: HeldLock) -> bool:
    return lock.release is not None
