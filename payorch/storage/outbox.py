"""The transactional outbox: events written in the transaction of the change that emits them, and
the signals that tell the webhook delivery supervisor about them as soon as they commit.

In this process the signal is the database's `DeliveryWakeup` (`storage/wakeup.py`):
`Database.transaction` rings it once its transaction, whose unit wrote an event here (`add_event`),
has committed. Other processes hear of it through PostgreSQL's `NOTIFY payorch_outbox`, sent at the
same commit, whose payload is the wake-up's `origin`: a listener can skip its own database's
notifications, the wake-up having already rung for them. PostgreSQL folds the identical
notifications of one transaction into one, so a transaction that writes many events rings once and
notifies once.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from typing import Any

from payorch.storage.database import Connection
from payorch.storage.database_thread import on_database_thread
from payorch.storage.wakeup import mark_outbox_written

OUTBOX_CHANNEL = "payorch_outbox"  # what other processes' delivery loops listen to


@on_database_thread
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
    (the database's delivery wake-up in this process, NOTIFY for the others)."""
    origin = mark_outbox_written()
    await conn.execute(
        f"""WITH event AS (
               INSERT INTO outbox_events (id, application_id, session_id, type, payload)
               VALUES ($1, $2, $3, $4, $5) RETURNING 1)
           SELECT pg_notify('{OUTBOX_CHANNEL}', $6) FROM event""",
        event_id,
        application_id,
        session_id,
        event_type,
        payload,
        origin,
    )


@on_database_thread
async def events_of_session(conn: Connection, session_id: uuid.UUID) -> list[dict[str, Any]]:
    """The delivery bodies of a session's events, in the order they were written."""
    rows = await conn.fetch(
        "SELECT payload FROM outbox_events WHERE session_id = $1 ORDER BY seq", session_id
    )
    return [row["payload"] for row in rows]
