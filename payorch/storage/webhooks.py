"""Webhook configurations, and the log of deliveries to them that merchants read and retry.

What the delivery supervisor does with deliveries (fan-out, claims, attempts) is in
`storage.webhook_deliveries`."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import asyncpg

from payorch.storage.database import Connection
from payorch.storage.database_thread import on_database_thread
from payorch.storage.pages import items_of, read_page
from payorch.values.errors import LimitReached, NotFound
from payorch.values.pagination import PageRequest
from payorch.values.statuses import DeliveryStatus, WebhookTestStatus


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
    last_test_status: WebhookTestStatus | None
    created_at: datetime
    updated_at: datetime | None


_CONFIG_COLUMNS = ", ".join(WebhookConfig.__dataclass_fields__)


def _config(row: asyncpg.Record) -> WebhookConfig:
    values = dict(row.items())
    for name in ("secret", "previous_secret"):
        if values[name] is not None:
            values[name] = bytes(values[name])
    if values["last_test_status"] is not None:
        values["last_test_status"] = WebhookTestStatus(values["last_test_status"])
    return WebhookConfig(**values)


@on_database_thread
async def create_webhook(
    conn: Connection,
    *,
    application_id: uuid.UUID,
    url: str,
    subscribed_events: list[str],
    secret: bytes,
    key_fingerprint: str,
    most: int,
    is_active: bool = True,
) -> WebhookConfig:
    """A new configuration of the application; `LimitReached` when it already has `most` (deleted
    ones do not count, inactive ones do), counted under a lock of the application's row, so two
    creates at once cannot both pass. Run in a transaction."""
    await conn.execute("SELECT 1 FROM applications WHERE id = $1 FOR NO KEY UPDATE", application_id)
    held = await conn.fetchval(
        "SELECT count(*) FROM webhook_configs WHERE application_id = $1 AND deleted_at IS NULL",
        application_id,
    )
    if held >= most:
        raise LimitReached(
            f"this application has {held} webhook configurations, the most it may have ({most}); "
            "delete one first"
        )
    row = await conn.fetchrow(
        f"""INSERT INTO webhook_configs
                (id, application_id, url, subscribed_events, secret, key_fingerprint, is_active)
            VALUES ($1, $2, $3, $4, $5, $6, $7) RETURNING {_CONFIG_COLUMNS}""",
        uuid.uuid4(),
        application_id,
        url,
        subscribed_events,
        secret,
        key_fingerprint,
        is_active,
    )
    return _config(row)


@on_database_thread
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


@on_database_thread
async def list_webhooks(
    conn: Connection, application_id: uuid.UUID, page: PageRequest
) -> tuple[list[WebhookConfig], int]:
    return await read_page(
        conn,
        page,
        columns=_CONFIG_COLUMNS,
        rows_from="webhook_configs WHERE application_id = $1 AND deleted_at IS NULL",
        args=[application_id],
        order_by="created_at DESC, id DESC",
        item=_config,
    )


@on_database_thread
async def update_webhook(
    conn: Connection,
    application_id: uuid.UUID,
    webhook_id: uuid.UUID,
    changes: dict[str, Any],
    *,
    now: datetime,
) -> WebhookConfig:
    """Apply `changes` (url, is_active, subscribed_events) and stamp updated_at."""
    allowed = {"url", "is_active", "subscribed_events"}
    assert set(changes) <= allowed
    assignments = ", ".join(f"{name} = ${index}" for index, name in enumerate(changes, start=4))
    row = await conn.fetchrow(
        f"""UPDATE webhook_configs SET {assignments}{", " if changes else ""}updated_at = $3
            WHERE id = $1 AND application_id = $2 AND deleted_at IS NULL RETURNING {_CONFIG_COLUMNS}""",
        webhook_id,
        application_id,
        now,
        *changes.values(),
    )
    if row is None:
        raise NotFound("webhook configuration not found", missing="webhook configuration")
    return _config(row)


@on_database_thread
async def rotate_secret(
    conn: Connection,
    application_id: uuid.UUID,
    webhook_id: uuid.UUID,
    *,
    secret: bytes,
    key_fingerprint: str,
    overlap_s: float,
    now: datetime,
) -> WebhookConfig:
    """The new secret signs from now on; the old one also signs for `overlap_s` more seconds."""
    row = await conn.fetchrow(
        f"""UPDATE webhook_configs
            SET previous_secret = secret,
                previous_secret_expires_at = $6::timestamptz + make_interval(secs => $5),
                secret = $3, key_fingerprint = $4, updated_at = $6
            WHERE id = $1 AND application_id = $2 AND deleted_at IS NULL RETURNING {_CONFIG_COLUMNS}""",
        webhook_id,
        application_id,
        secret,
        key_fingerprint,
        float(overlap_s),
        now,
    )
    if row is None:
        raise NotFound("webhook configuration not found", missing="webhook configuration")
    return _config(row)


@on_database_thread
async def delete_webhook(
    conn: Connection, application_id: uuid.UUID, webhook_id: uuid.UUID, *, now: datetime
) -> None:
    """Delete the configuration; its pending deliveries are given up."""
    deleted = await conn.fetchval(
        """UPDATE webhook_configs SET deleted_at = $3, is_active = false, updated_at = $3
           WHERE id = $1 AND application_id = $2 AND deleted_at IS NULL RETURNING id""",
        webhook_id,
        application_id,
        now,
    )
    if deleted is None:
        raise NotFound("webhook configuration not found", missing="webhook configuration")
    await fail_pending_deliveries(conn, webhook_id, "webhook configuration deleted")


@on_database_thread
async def record_test(
    conn: Connection, webhook_id: uuid.UUID, at: datetime, status: WebhookTestStatus
) -> None:
    await conn.execute(
        "UPDATE webhook_configs SET last_test_at = $2, last_test_status = $3 WHERE id = $1",
        webhook_id,
        at,
        status,
    )


@on_database_thread
async def deactivate(conn: Connection, webhook_id: uuid.UUID, reason: str, *, now: datetime) -> None:
    """The receiver said 410 Gone: stop sending to it."""
    await conn.execute(
        "UPDATE webhook_configs SET is_active = false, updated_at = $2 WHERE id = $1", webhook_id, now
    )
    await fail_pending_deliveries(conn, webhook_id, reason)


_FAIL_PENDING_DELIVERIES = f"""
    UPDATE webhook_deliveries SET status = '{DeliveryStatus.FAILED}', last_error = $2, next_attempt_at = NULL
    WHERE config_id = $1 AND status = '{DeliveryStatus.PENDING}'"""


@on_database_thread
async def fail_pending_deliveries(conn: Connection, webhook_id: uuid.UUID, reason: str) -> None:
    await conn.execute(_FAIL_PENDING_DELIVERIES, webhook_id, reason)


# --- The delivery log (the supervisor's claims and attempts: `storage.webhook_deliveries`) ------


@dataclass(frozen=True)
class DeliveryView:
    id: uuid.UUID
    event_id: str
    event_type: str
    status: DeliveryStatus
    attempts: int
    next_attempt_at: datetime | None
    last_attempt_at: datetime | None
    last_status_code: int | None
    last_error: str | None
    delivered_at: datetime | None
    created_at: datetime
    # A PENDING delivery's wait behind its session's earlier event to the same configuration, still
    # PENDING: that event's id and that delivery's (a session's events go out in order;
    # `storage.webhook_deliveries`).
    waits_for_event_id: str | None
    waits_for_delivery_id: uuid.UUID | None
    claimed_until: datetime | None  # the lease of an attempt in flight, if one is
    attempt_log: list[dict[str, Any]]


DELIVERY_COLUMNS = """d.id, e.id AS event_id, e.type AS event_type, d.status, d.attempts, d.next_attempt_at,
    d.last_attempt_at, d.last_status_code, d.last_error, d.delivered_at, d.created_at,
    held.event_id AS waits_for_event_id, held.id AS waits_for_delivery_id, d.claimed_until"""
# The deliveries of the configuration `$1` with their events, each PENDING one with the first
# earlier delivery of its session to the same configuration that is still PENDING (`held`).
DELIVERIES_FROM = f"""webhook_deliveries d JOIN outbox_events e ON e.seq = d.event_seq
    LEFT JOIN LATERAL (
        SELECT pe.id AS event_id, earlier.id FROM webhook_deliveries earlier
        JOIN outbox_events pe ON pe.seq = earlier.event_seq
        WHERE d.status = '{DeliveryStatus.PENDING}'
          AND earlier.config_id = d.config_id AND earlier.session_id = d.session_id
          AND earlier.event_seq < d.event_seq AND earlier.status = '{DeliveryStatus.PENDING}'
        ORDER BY earlier.event_seq LIMIT 1) held ON true
    WHERE d.config_id = $1"""


_DELIVERY_COUNT = "SELECT deliveries FROM webhook_delivery_counts WHERE config_id = $1"
_ATTEMPTS_OF_DELIVERIES = """
    SELECT delivery_id, attempted_at, status_code, error, latency_ms FROM webhook_attempts
    WHERE delivery_id = ANY($1::uuid[]) ORDER BY id"""


def _attempt(row: asyncpg.Record) -> dict[str, Any]:
    return dict(row.items())


@on_database_thread
async def list_deliveries(
    conn: Connection, webhook_id: uuid.UUID, page: PageRequest
) -> tuple[list[DeliveryView], int]:
    """A page of the configuration's deliveries, newest first, each with its attempts; three
    statements, so run it in a snapshot (`Database.snapshot`). The total is the configuration's
    counter (kept by the database with the deliveries, migration 0013); a page past the end reads
    nothing more."""
    rows, total = await read_page(
        conn,
        page,
        columns=DELIVERY_COLUMNS,
        rows_from=DELIVERIES_FROM,
        args=[webhook_id],
        order_by="d.created_at DESC, d.id DESC",
        item=lambda row: row,
        total=int(await conn.fetchval(_DELIVERY_COUNT, webhook_id) or 0),
    )
    log = await items_of(
        conn, _ATTEMPTS_OF_DELIVERIES, [row["id"] for row in rows], owner="delivery_id", item=_attempt
    )
    return [delivery_view(row, log[row["id"]]) for row in rows], total


def delivery_view(row: asyncpg.Record, attempt_log: list[dict[str, Any]]) -> DeliveryView:
    """The delivery a row of `DELIVERY_COLUMNS` holds (other columns left aside), with its attempts."""
    values = {name: row[name] for name in DeliveryView.__dataclass_fields__ if name != "attempt_log"}
    return DeliveryView(**{**values, "status": DeliveryStatus(row["status"])}, attempt_log=attempt_log)


_RETRY_DELIVERY = f"""
    UPDATE webhook_deliveries SET status = '{DeliveryStatus.PENDING}', next_attempt_at = $3
    WHERE id = $1 AND config_id = $2 RETURNING id"""


@on_database_thread
async def retry_delivery(
    conn: Connection, webhook_id: uuid.UUID, delivery_id: uuid.UUID, *, now: datetime
) -> None:
    """Send a delivery again now (by hand), whatever became of it."""
    found = await conn.fetchval(
        _RETRY_DELIVERY,
        delivery_id,
        webhook_id,
        now,
    )
    if found is None:
        raise NotFound("delivery not found", missing="delivery")
