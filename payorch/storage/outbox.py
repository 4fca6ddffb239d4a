"""The transactional outbox: events written in the transaction of the change that emits them."""

from __future__ import annotations

import uuid
from typing import Any

from payorch.storage.database import Connection


async def add_event(
    conn: Connection,
    *,
    event_id: str,
    application_id: uuid.UUID,
    session_id: uuid.UUID | None,
    event_type: str,
    payload: dict[str, Any],
) -> None:
    await conn.execute(
        """INSERT INTO outbox_events (id, application_id, session_id, type, payload)
           VALUES ($1, $2, $3, $4, $5)""",
        event_id,
        application_id,
        session_id,
        event_type,
        payload,
    )
    await conn.execute("SELECT pg_notify('payorch_outbox', $1)", str(application_id))


async def events_of_session(conn: Connection, session_id: uuid.UUID) -> list[dict[str, Any]]:
    """The delivery bodies of a session's events, in the order they were written."""
    rows = await conn.fetch(
        "SELECT payload FROM outbox_events WHERE session_id = $1 ORDER BY seq", session_id
    )
    return [row["payload"] for row in rows]


async def first_sighting(conn: Connection, provider: str, application_id: uuid.UUID, event_id: str) -> bool:
    """Record a provider's event for an application; False when it was seen before (a redelivery)."""
    inserted = await conn.fetchval(
        """INSERT INTO provider_events_seen (provider, application_id, event_id) VALUES ($1, $2, $3)
           ON CONFLICT DO NOTHING RETURNING 1""",
        provider,
        application_id,
        event_id,
    )
    return inserted is not None
