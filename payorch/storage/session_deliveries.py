"""The webhook deliveries of one session's events, each attempt of each, as a session's page shows
them in its timeline: read through the application's configurations (the deliveries' index leads
with the configuration), so a session's read costs its own rows, however many the application has."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime

from payorch.storage.database import Connection
from payorch.storage.database_thread import on_database_thread


@dataclass(frozen=True)
class DeliveryStep:
    """One attempt of a delivery (`attempted_at` set), or a delivery not attempted yet."""

    delivery_id: uuid.UUID
    event_type: str
    url: str
    status: str  # the delivery's: PENDING, DELIVERED, FAILED
    created_at: datetime
    next_attempt_at: datetime | None
    attempt_number: int | None  # 1 for the first attempt; None: not attempted yet
    attempted_at: datetime | None
    status_code: int | None
    error: str | None


_STEPS = """
    SELECT d.id AS delivery_id, e.type AS event_type, c.url, d.status, d.created_at, d.next_attempt_at,
           (row_number() OVER (PARTITION BY d.id ORDER BY a.id))::int AS attempt_number,
           a.attempted_at, a.status_code, a.error
    FROM webhook_configs c
    JOIN webhook_deliveries d ON d.config_id = c.id AND d.session_id = $2
    JOIN outbox_events e ON e.seq = d.event_seq
    LEFT JOIN webhook_attempts a ON a.delivery_id = d.id
    WHERE c.application_id = $1
    ORDER BY d.created_at, d.id, a.id"""


@on_database_thread
async def delivery_steps(
    conn: Connection, application_id: uuid.UUID, session_id: uuid.UUID
) -> list[DeliveryStep]:
    """Every attempt of every delivery of the session's events (a delivery not attempted yet once,
    with no attempt), oldest delivery first, its attempts in order."""
    rows = await conn.fetch(_STEPS, application_id, session_id)
    return [
        DeliveryStep(
            **{**dict(row.items()), "attempt_number": row["attempt_number"] if row["attempted_at"] else None}
        )
        for row in rows
    ]
