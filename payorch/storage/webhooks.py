"""Webhook configurations, and deliveries of outbox events to them."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import asyncpg

from payorch.engine.errors import NotFound
from payorch.engine.pagination import PageRequest
from payorch.storage.database import Connection


@dataclass(frozen=True)
class WebhookConfig:
    id: uuid.UUID
    application_id: uuid.UUID
    url: str
    is_active: bool
    subscribed_events: list[str]
    secret: bytes
    key_fingerprint: str
    previous_secret: bytes | None
    previous_secret_expires_at: datetime | None
    last_test_at: datetime | None
    last_test_status: str | None
    created_at: datetime
    updated_at: datetime | None


_CONFIG_COLUMNS = ", ".join(WebhookConfig.__dataclass_fields__)


def _config(row: asyncpg.Record) -> WebhookConfig:
    values = dict(row.items())
    for name in ("secret", "previous_secret"):
        if values[name] is not None:
            values[name] = bytes(values[name])
    return WebhookConfig(**values)


async def create_webhook(
    conn: Connection,
    *,
    application_id: uuid.UUID,
    url: str,
    subscribed_events: list[str],
    secret: bytes,
    key_fingerprint: str,
) -> WebhookConfig:
    row = await conn.fetchrow(
        f"""INSERT INTO webhook_configs (id, application_id, url, subscribed_events, secret, key_fingerprint)
            VALUES ($1, $2, $3, $4, $5, $6) RETURNING {_CONFIG_COLUMNS}""",
        uuid.uuid4(),
        application_id,
        url,
        subscribed_events,
        secret,
        key_fingerprint,
    )
    return _config(row)


async def get_webhook(
    conn: Connection, application_id: uuid.UUID, webhook_id: uuid.UUID
) -> WebhookConfig | None:
    row = await conn.fetchrow(
        f"""SELECT {_CONFIG_COLUMNS} FROM webhook_configs
            WHERE id = $1 AND application_id = $2 AND deleted_at IS NULL""",
        webhook_id,
        application_id,
    )
    return _config(row) if row else None


async def list_webhooks(
    conn: Connection, application_id: uuid.UUID, page: PageRequest
) -> tuple[list[WebhookConfig], int]:
    total = await conn.fetchval(
        "SELECT count(*) FROM webhook_configs WHERE application_id = $1 AND deleted_at IS NULL",
        application_id,
    )
    rows = await conn.fetch(
        f"""SELECT {_CONFIG_COLUMNS} FROM webhook_configs WHERE application_id = $1 AND deleted_at IS NULL
            ORDER BY created_at DESC, id DESC LIMIT $2 OFFSET $3""",
        application_id,
        page.limit,
        page.offset,
    )
    return [_config(row) for row in rows], int(total)


async def update_webhook(
    conn: Connection, application_id: uuid.UUID, webhook_id: uuid.UUID, changes: dict[str, Any]
) -> WebhookConfig:
    """Apply `changes` (url, is_active, subscribed_events) and stamp updated_at."""
    allowed = {"url", "is_active", "subscribed_events"}
    assert set(changes) <= allowed
    assignments = ", ".join(f"{name} = ${index}" for index, name in enumerate(changes, start=3))
    row = await conn.fetchrow(
        f"""UPDATE webhook_configs SET {assignments}{", " if changes else ""}updated_at = now()
            WHERE id = $1 AND application_id = $2 AND deleted_at IS NULL RETURNING {_CONFIG_COLUMNS}""",
        webhook_id,
        application_id,
        *changes.values(),
    )
    if row is None:
        raise NotFound("webhook configuration not found")
    return _config(row)


async def rotate_secret(
    conn: Connection,
    application_id: uuid.UUID,
    webhook_id: uuid.UUID,
    *,
    secret: bytes,
    key_fingerprint: str,
    overlap_s: float,
) -> WebhookConfig:
    """The new secret signs from now on; the old one also signs for `overlap_s` more seconds."""
    row = await conn.fetchrow(
        f"""UPDATE webhook_configs
            SET previous_secret = secret, previous_secret_expires_at = now() + make_interval(secs => $5),
                secret = $3, key_fingerprint = $4, updated_at = now()
            WHERE id = $1 AND application_id = $2 AND deleted_at IS NULL RETURNING {_CONFIG_COLUMNS}""",
        webhook_id,
        application_id,
        secret,
        key_fingerprint,
        float(overlap_s),
    )
    if row is None:
        raise NotFound("webhook configuration not found")
    return _config(row)


async def delete_webhook(conn: Connection, application_id: uuid.UUID, webhook_id: uuid.UUID) -> None:
    """Delete the configuration; its pending deliveries are given up."""
    deleted = await conn.fetchval(
        """UPDATE webhook_configs SET deleted_at = now(), is_active = false, updated_at = now()
           WHERE id = $1 AND application_id = $2 AND deleted_at IS NULL RETURNING id""",
        webhook_id,
        application_id,
    )
    if deleted is None:
        raise NotFound("webhook configuration not found")
    await fail_pending_deliveries(conn, webhook_id, "webhook configuration deleted")


async def record_test(conn: Connection, webhook_id: uuid.UUID, at: datetime, status: str) -> None:
    await conn.execute(
        "UPDATE webhook_configs SET last_test_at = $2, last_test_status = $3 WHERE id = $1",
        webhook_id,
        at,
        status,
    )


async def deactivate(conn: Connection, webhook_id: uuid.UUID, reason: str) -> None:
    """The receiver said 410 Gone: stop sending to it."""
    await conn.execute(
        "UPDATE webhook_configs SET is_active = false, updated_at = now() WHERE id = $1", webhook_id
    )
    await fail_pending_deliveries(conn, webhook_id, reason)


async def fail_pending_deliveries(conn: Connection, webhook_id: uuid.UUID, reason: str) -> None:
    await conn.execute(
        """UPDATE webhook_deliveries SET status = 'FAILED', last_error = $2, next_attempt_at = NULL
           WHERE config_id = $1 AND status = 'PENDING'""",
        webhook_id,
        reason,
    )


# --- Fan-out and delivery ----------------------------------------------------------------------


async def fan_out_events(conn: Connection, first_wait_s: float, limit: int = 200) -> int:
    """Give each new outbox event one delivery per active configuration of its application that
    subscribes to its type; returns how many events were fanned out."""
    events = await conn.fetch(
        """SELECT seq, application_id, session_id, type FROM outbox_events
           WHERE fanned_out_at IS NULL ORDER BY seq LIMIT $1 FOR UPDATE SKIP LOCKED""",
        limit,
    )
    for event in events:
        await conn.execute(
            """INSERT INTO webhook_deliveries (id, config_id, application_id, event_seq, session_id, status,
                                               next_attempt_at)
               SELECT gen_random_uuid(), c.id, c.application_id, $1, $3, 'PENDING',
                      now() + make_interval(secs => $5)
               FROM webhook_configs c
               WHERE c.application_id = $2 AND c.is_active AND c.deleted_at IS NULL
                 AND $4 = ANY(c.subscribed_events)
               ON CONFLICT (config_id, event_seq) DO NOTHING""",
            event["seq"],
            event["application_id"],
            event["session_id"],
            event["type"],
            float(first_wait_s),
        )
    if events:
        await conn.execute(
            "UPDATE outbox_events SET fanned_out_at = now() WHERE seq = ANY($1::bigint[])",
            [event["seq"] for event in events],
        )
    return len(events)


@dataclass(frozen=True)
class ClaimedDelivery:
    id: uuid.UUID
    config_id: uuid.UUID
    attempts: int  # including this one
    url: str
    secret: bytes
    previous_secret: bytes | None
    key_fingerprint: str
    event_id: str
    payload: dict[str, Any]


async def claim_due_deliveries(conn: Connection, *, limit: int, lease_s: float) -> list[ClaimedDelivery]:
    """Deliveries due now whose session has no earlier delivery to the same configuration still
    pending, claimed for `lease_s` (FOR UPDATE SKIP LOCKED; a claim whose process died runs out)."""
    rows = await conn.fetch(
        """WITH due AS (
               SELECT d.id FROM webhook_deliveries d
               JOIN webhook_configs active ON active.id = d.config_id
                    AND active.is_active AND active.deleted_at IS NULL
               WHERE d.status = 'PENDING' AND d.next_attempt_at <= now()
                 AND NOT EXISTS (
                     SELECT 1 FROM webhook_deliveries earlier
                     WHERE earlier.config_id = d.config_id AND earlier.session_id = d.session_id
                       AND earlier.event_seq < d.event_seq AND earlier.status = 'PENDING')
               ORDER BY d.next_attempt_at LIMIT $1 FOR UPDATE OF d SKIP LOCKED)
           UPDATE webhook_deliveries d
              SET attempts = d.attempts + 1, next_attempt_at = now() + make_interval(secs => $2),
                  last_attempt_at = now()
             FROM due, webhook_configs c, outbox_events e
            WHERE d.id = due.id AND c.id = d.config_id AND e.seq = d.event_seq
        RETURNING d.id, d.config_id, d.attempts, c.url, c.secret,
                  CASE WHEN c.previous_secret_expires_at > now() THEN c.previous_secret END
                      AS previous_secret,
                  c.key_fingerprint, e.id AS event_id, e.payload""",
        limit,
        float(lease_s),
    )
    claimed = []
    for row in rows:
        values = dict(row.items())
        values["secret"] = bytes(values["secret"])
        if values["previous_secret"] is not None:
            values["previous_secret"] = bytes(values["previous_secret"])
        claimed.append(ClaimedDelivery(**values))
    return claimed


async def release_claims(conn: Connection, delivery_ids: list[uuid.UUID]) -> None:
    """Hand claimed deliveries back unattempted: due again now, the claim's attempt not counted."""
    await conn.execute(
        """UPDATE webhook_deliveries SET next_attempt_at = now(), attempts = greatest(attempts - 1, 0)
           WHERE id = ANY($1::uuid[]) AND status = 'PENDING'""",
        delivery_ids,
    )


async def record_attempt(
    conn: Connection,
    delivery_id: uuid.UUID,
    *,
    status_code: int | None,
    error: str | None,
    latency_ms: int,
    response_body: str | None,
    outcome: str,
    retry_in_s: float | None,
) -> None:
    """Log one attempt and move the delivery on: DELIVERED, FAILED, or PENDING again in `retry_in_s`."""
    await conn.execute(
        """INSERT INTO webhook_attempts (delivery_id, status_code, error, latency_ms, response_body)
           VALUES ($1, $2, $3, $4, $5)""",
        delivery_id,
        status_code,
        error,
        latency_ms,
        response_body,
    )
    await conn.execute(
        """UPDATE webhook_deliveries
              SET status = $2, last_status_code = $3, last_error = $4,
                  next_attempt_at = CASE WHEN $2 = 'PENDING' THEN now() + make_interval(secs => $5) END,
                  delivered_at = CASE WHEN $2 = 'DELIVERED' THEN now() END
            WHERE id = $1""",
        delivery_id,
        outcome,
        status_code,
        error,
        float(retry_in_s or 0),
    )


@dataclass(frozen=True)
class DeliveryView:
    id: uuid.UUID
    event_id: str
    event_type: str
    status: str
    attempts: int
    next_attempt_at: datetime | None
    last_attempt_at: datetime | None
    last_status_code: int | None
    last_error: str | None
    delivered_at: datetime | None
    created_at: datetime
    attempt_log: list[dict[str, Any]]


async def list_deliveries(
    conn: Connection, webhook_id: uuid.UUID, page: PageRequest
) -> tuple[list[DeliveryView], int]:
    total = await conn.fetchval("SELECT count(*) FROM webhook_deliveries WHERE config_id = $1", webhook_id)
    rows = await conn.fetch(
        """SELECT d.id, e.id AS event_id, e.type AS event_type, d.status, d.attempts, d.next_attempt_at,
                  d.last_attempt_at, d.last_status_code, d.last_error, d.delivered_at, d.created_at
           FROM webhook_deliveries d JOIN outbox_events e ON e.seq = d.event_seq
           WHERE d.config_id = $1 ORDER BY d.created_at DESC, d.id DESC LIMIT $2 OFFSET $3""",
        webhook_id,
        page.limit,
        page.offset,
    )
    attempts = await conn.fetch(
        """SELECT delivery_id, attempted_at, status_code, error, latency_ms FROM webhook_attempts
           WHERE delivery_id = ANY($1::uuid[]) ORDER BY id""",
        [row["id"] for row in rows],
    )
    log: dict[uuid.UUID, list[dict[str, Any]]] = {row["id"]: [] for row in rows}
    for attempt in attempts:
        log[attempt["delivery_id"]].append(dict(attempt.items()))
    return [DeliveryView(**dict(row.items()), attempt_log=log[row["id"]]) for row in rows], int(total)


async def retry_delivery(conn: Connection, webhook_id: uuid.UUID, delivery_id: uuid.UUID) -> None:
    """Send a delivery again now (by hand), whatever became of it."""
    found = await conn.fetchval(
        """UPDATE webhook_deliveries SET status = 'PENDING', next_attempt_at = now()
           WHERE id = $1 AND config_id = $2 RETURNING id""",
        delivery_id,
        webhook_id,
    )
    if found is None:
        raise NotFound("delivery not found")


async def delivery_statuses(conn: Connection, session_id: uuid.UUID) -> list[tuple[str, str]]:
    """(event type, delivery status) of a session's deliveries in event order (tests, operators)."""
    rows = await conn.fetch(
        """SELECT e.type, d.status FROM webhook_deliveries d JOIN outbox_events e ON e.seq = d.event_seq
           WHERE d.session_id = $1 ORDER BY d.event_seq""",
        session_id,
    )
    return [(row["type"], row["status"]) for row in rows]
