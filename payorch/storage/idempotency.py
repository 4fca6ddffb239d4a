"""Idempotency keys, claimed in the database so the rule holds across service processes."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from payorch.storage.database import Connection


@dataclass(frozen=True)
class Claimed:
    """This request owns the key; `resource_id` is the id to give what it creates (kept across a
    takeover of an abandoned claim, so a retry after a crash names the same resource)."""

    resource_id: uuid.UUID


@dataclass(frozen=True)
class Replay:
    status: int
    body: dict[str, Any]


@dataclass(frozen=True)
class Mismatch:
    pass


@dataclass(frozen=True)
class InProgress:
    pass


ClaimResult = Claimed | Replay | Mismatch | InProgress


async def claim_idempotency_key(
    conn: Connection,
    *,
    application_id: uuid.UUID,
    scope: str,
    key: str,
    fingerprint: bytes,
    lease_s: float,
    retention_s: float,
) -> ClaimResult:
    """Claim `key` for a new request, or say what became of the request that claimed it first.

    An expired key is claimed afresh; an in-progress claim whose lease ran out (its process died) is
    taken over by a request with the same fingerprint.
    """
    row = await conn.fetchrow(
        """INSERT INTO idempotency_keys AS k
               (application_id, scope, key, fingerprint, resource_id, locked_until, expires_at)
           VALUES ($1, $2, $3, $4, $5,
                   now() + make_interval(secs => $6), now() + make_interval(secs => $7))
           ON CONFLICT (application_id, scope, key) DO UPDATE
               SET fingerprint = EXCLUDED.fingerprint, resource_id = EXCLUDED.resource_id,
                   response_status = NULL, response_body = NULL, locked_until = EXCLUDED.locked_until,
                   created_at = now(), expires_at = EXCLUDED.expires_at
               WHERE k.expires_at <= now()
           RETURNING resource_id""",
        application_id,
        scope,
        key,
        fingerprint,
        uuid.uuid4(),
        float(lease_s),
        float(retention_s),
    )
    if row is not None:
        return Claimed(row["resource_id"])
    existing = await conn.fetchrow(
        """SELECT fingerprint, resource_id, response_status, response_body, locked_until <= now() AS abandoned
           FROM idempotency_keys WHERE application_id = $1 AND scope = $2 AND key = $3 FOR UPDATE""",
        application_id,
        scope,
        key,
    )
    if bytes(existing["fingerprint"]) != fingerprint:
        return Mismatch()
    if existing["response_status"] is not None:
        return Replay(existing["response_status"], existing["response_body"])
    if existing["abandoned"]:
        await conn.execute(
            """UPDATE idempotency_keys SET locked_until = now() + make_interval(secs => $4)
               WHERE application_id = $1 AND scope = $2 AND key = $3""",
            application_id,
            scope,
            key,
            float(lease_s),
        )
        return Claimed(existing["resource_id"])
    return InProgress()


async def complete_idempotency_key(
    conn: Connection, *, application_id: uuid.UUID, scope: str, key: str, status: int, body: dict[str, Any]
) -> None:
    """Store the answer to replay for `key` (in the transaction that made what it describes)."""
    await conn.execute(
        """UPDATE idempotency_keys SET response_status = $4, response_body = $5
           WHERE application_id = $1 AND scope = $2 AND key = $3""",
        application_id,
        scope,
        key,
        status,
        body,
    )


async def release_idempotency_key(
    conn: Connection, *, application_id: uuid.UUID, scope: str, key: str
) -> None:
    """Forget an in-progress claim whose request changed nothing, so the caller may retry."""
    await conn.execute(
        """DELETE FROM idempotency_keys
           WHERE application_id = $1 AND scope = $2 AND key = $3 AND response_status IS NULL""",
        application_id,
        scope,
        key,
    )


async def delete_expired_idempotency_keys(conn: Connection, now: datetime, limit: int = 1000) -> int:
    """Delete up to `limit` keys past their retention; returns how many."""
    deleted = await conn.fetch(
        """DELETE FROM idempotency_keys WHERE ctid = ANY(ARRAY(
               SELECT ctid FROM idempotency_keys WHERE expires_at <= $1 LIMIT $2))
           RETURNING 1""",
        now,
        limit,
    )
    return len(deleted)
