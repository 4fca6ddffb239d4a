"""One webhook delivery in detail, as its page shows it: the event's body that every attempt sent,
and each attempt with the headers payorch sent, the receiver's status, headers and the first bytes
of its body, or the error when there was no answer; and the removal of those details once
`webhooks.attempt_details_retention_days` have passed (migration 0034).

The body sent is not stored per attempt: every attempt sends the event's stored body
(`outbox_events.payload`, through `outbound.attempt.request_body`), so it is read from there.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import asyncpg

from payorch.storage.database import Connection
from payorch.storage.database_thread import on_database_thread
from payorch.storage.webhooks import DELIVERIES_FROM, DELIVERY_COLUMNS, DeliveryView, delivery_view

Headers = list[tuple[str, str]]


@dataclass(frozen=True)
class AttemptDetails:
    """One attempt, its details None once removed (`details_removed_at` says when)."""

    number: int  # 1 for the delivery's first attempt
    attempted_at: datetime
    status_code: int | None
    error: str | None
    latency_ms: int
    request_headers: Headers | None
    response_headers: Headers | None
    response_body: str | None
    details_removed_at: datetime | None


@dataclass(frozen=True)
class DeliveryDetails:
    delivery: DeliveryView
    webhook_id: uuid.UUID
    session_id: uuid.UUID | None
    payload: dict[str, Any]  # the event's stored body: what every attempt sent
    attempts: list[AttemptDetails]  # the latest attempts shown, oldest first
    attempts_recorded: int  # every attempt recorded, those not shown included


_DELIVERY = f"""SELECT {DELIVERY_COLUMNS}, d.config_id, d.session_id, e.payload,
        (SELECT count(*) FROM webhook_attempts a WHERE a.delivery_id = d.id) AS attempts_recorded
    FROM {DELIVERIES_FROM} AND d.id = $2"""

# The latest `$2` attempts of the delivery `$1`, numbered from its first, oldest first.
_ATTEMPTS = """
    SELECT * FROM (
        SELECT (row_number() OVER (ORDER BY id))::int AS number, id, attempted_at, status_code, error,
               latency_ms, request_headers, response_headers, response_body, details_removed_at
        FROM webhook_attempts WHERE delivery_id = $1) numbered
    ORDER BY id DESC LIMIT $2"""


def _headers(value: list[list[str]] | None) -> Headers | None:
    return None if value is None else [(name, text) for name, text in value]


def _attempt(row: asyncpg.Record) -> AttemptDetails:
    values = {name: row[name] for name in AttemptDetails.__dataclass_fields__}
    values["request_headers"] = _headers(row["request_headers"])
    values["response_headers"] = _headers(row["response_headers"])
    return AttemptDetails(**values)


@on_database_thread
async def read_delivery(
    conn: Connection, webhook_id: uuid.UUID, delivery_id: uuid.UUID, *, attempts_shown: int
) -> DeliveryDetails | None:
    """The configuration's delivery `delivery_id` with its event's body and its latest
    `attempts_shown` attempts in detail (None: the configuration has no such delivery). Two
    statements: run it in a snapshot."""
    row = await conn.fetchrow(_DELIVERY, webhook_id, delivery_id)
    if row is None:
        return None
    attempts = [_attempt(attempt) for attempt in await conn.fetch(_ATTEMPTS, delivery_id, attempts_shown)]
    attempts.reverse()
    log = [
        {
            "attempted_at": item.attempted_at,
            "status_code": item.status_code,
            "error": item.error,
            "latency_ms": item.latency_ms,
        }
        for item in attempts
    ]
    return DeliveryDetails(
        delivery=delivery_view(row, log),
        webhook_id=row["config_id"],
        session_id=row["session_id"],
        payload=row["payload"],
        attempts=attempts,
        attempts_recorded=int(row["attempts_recorded"]),
    )


# Up to `$2` attempts made before `$1` whose details are still kept, oldest first (the partial index
# `webhook_attempts_details_kept`), emptied and stamped `$3`; the rows another transaction holds are
# left to the next batch.
_REMOVE_DETAILS = """
    WITH expired AS (
        SELECT id FROM webhook_attempts
        WHERE details_removed_at IS NULL AND attempted_at < $1
        ORDER BY attempted_at LIMIT $2
        FOR NO KEY UPDATE SKIP LOCKED)
    UPDATE webhook_attempts a
       SET request_headers = NULL, response_headers = NULL, response_body = NULL, details_removed_at = $3
      FROM expired WHERE a.id = expired.id"""


@on_database_thread
async def remove_expired_details(conn: Connection, *, before: datetime, limit: int, now: datetime) -> int:
    """Empty the details (headers sent and received, the body excerpt) of up to `limit` attempts made
    before `before`, oldest first, stamped removed at `now`; returns how many."""
    status = await conn.execute(_REMOVE_DETAILS, before, limit, now)
    return int(status.split()[-1])
