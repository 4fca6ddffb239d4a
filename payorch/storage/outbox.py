"""The transactional outbox: events written in the transaction of the change that emits them, and
the signals that tell the webhook delivery supervisor about them as soon as they commit.

In this process the signal is the database's `OutboxDoorbell`: `Database.transaction` rings it once
its transaction, whose unit wrote an event here (`add_event`), has committed. Other processes hear
of it through PostgreSQL's `NOTIFY payorch_outbox`, sent at the same commit, whose payload is the
doorbell's `origin`: a listener can skip its own database's notifications, the doorbell having
already rung for them. PostgreSQL folds the identical notifications of one transaction into one, so
a transaction that writes many events rings once and notifies once.
"""

from __future__ import annotations

import secrets
import uuid
from collections.abc import Mapping
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any

import trio

if TYPE_CHECKING:
    from payorch.storage.database import Connection


class OutboxDoorbell:
    """Rung after the commit of each transaction of one database that wrote outbox events; its
    waiter (the delivery supervisor) looks for new events then. Rings while no one waits are kept as
    one: many commits during one look make one more look, not one each."""

    def __init__(self) -> None:
        self.origin = secrets.token_hex(8)  # the NOTIFY payload of this database's events
        self._rung = trio.Event()

    def ring(self) -> None:
        self._rung.set()

    async def wait(self) -> None:
        """Return once rung since the last `wait` returned (at once if it already was)."""
        await self._rung.wait()
        self._rung = trio.Event()


class OutboxWrites:
    """Whether one transaction's unit wrote outbox events: a mutable mark the caller makes and keeps,
    and the unit's side finds through a context variable (the unit runs as an asyncio task of its
    own, so a value set there never reaches the caller; a change to this object does)."""

    def __init__(self, doorbell: OutboxDoorbell) -> None:
        self.doorbell = doorbell
        self.written = False

    def track(self) -> None:
        """Make this the mark of the unit about to run in the current context."""
        _writes.set(self)

    def ring_if_written(self) -> None:
        """After the commit: ring the doorbell when an event was written."""
        if self.written:
            self.doorbell.ring()


_writes: ContextVar[OutboxWrites | None] = ContextVar("payorch_outbox_writes", default=None)


async def add_event(
    conn: Connection,
    *,
    event_id: str,
    application_id: uuid.UUID,
    session_id: uuid.UUID | None,
    event_type: str,
    payload: Mapping[str, object],
) -> None:
    """Write an event in the caller's transaction; it is announced when the transaction commits
    (the database's doorbell in this process, NOTIFY for the others)."""
    writes = _writes.get()
    if writes is not None:
        writes.written = True
    await conn.execute(
        """WITH event AS (
               INSERT INTO outbox_events (id, application_id, session_id, type, payload)
               VALUES ($1, $2, $3, $4, $5) RETURNING 1)
           SELECT pg_notify('payorch_outbox', $6) FROM event""",
        event_id,
        application_id,
        session_id,
        event_type,
        payload,
        "" if writes is None else writes.doorbell.origin,
    )


async def events_of_session(conn: Connection, session_id: uuid.UUID) -> list[dict[str, Any]]:
    """The delivery bodies of a session's events, in the order they were written."""
    rows = await conn.fetch(
        "SELECT payload FROM outbox_events WHERE session_id = $1 ORDER BY seq", session_id
    )
    return [row["payload"] for row in rows]
