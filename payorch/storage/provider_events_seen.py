"""Provider events payorch has applied, by (provider, application, event id): a provider delivers an
event at least once, and payorch applies it once (table `provider_events_seen`, migration 0003)."""

from __future__ import annotations

import uuid

from payorch.storage.database import Connection
from payorch.storage.database_thread import on_database_thread


@on_database_thread
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
