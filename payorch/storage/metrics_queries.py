"""Reads for `/metrics`: counts the scrape asks for, each served by a partial index."""

from __future__ import annotations

from datetime import datetime

from payorch.metrics import OutboxBacklog
from payorch.storage.database import Connection
from payorch.storage.database_thread import on_database_thread
from payorch.values.statuses import DeliveryStatus

_OUTBOX_BACKLOG = f"""
    SELECT (SELECT count(*) FROM outbox_events WHERE fanned_out_at IS NULL) AS fan_out,
           count(*) FILTER (WHERE d.next_attempt_at <= $1) AS due,
           count(*) FILTER (WHERE d.next_attempt_at > $1) AS scheduled
    FROM webhook_deliveries d
    JOIN webhook_configs c ON c.id = d.config_id AND c.is_active AND c.deleted_at IS NULL
    WHERE d.status = '{DeliveryStatus.PENDING}'"""


@on_database_thread
async def outbox_backlog(conn: Connection, *, now: datetime) -> OutboxBacklog:
    """Outbox events not fanned out yet, and PENDING deliveries to active configurations, split
    into due now and not due yet (waiting for a retry, or claimed by an attempt in flight: a claim
    moves `next_attempt_at` to the end of its lease). Deliveries to an inactive configuration are
    left out: nothing sends them until it is switched on again."""
    row = await conn.fetchrow(_OUTBOX_BACKLOG, now)
    return OutboxBacklog(fan_out=int(row["fan_out"]), due=int(row["due"]), scheduled=int(row["scheduled"]))
