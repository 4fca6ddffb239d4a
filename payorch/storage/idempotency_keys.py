"""Idempotency keys, claimed in the database so the rule holds across service processes: on their
own (`claim_new_idempotency_keys`, `claim_idempotency_key`), or by the very statement that stores
what a request made, its answer given with the claim (`fresh_claim_cte`)."""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from payorch.storage.database import Connection
from payorch.storage.database_thread import on_database_thread
from payorch.storage.nodes import LIVE_NODES


@dataclass(frozen=True)
class Claimed:
    """This request owns the key; `resource_id` is the id to give what it creates, and `claimed_at`
    when the key's first request claimed it. Both are kept across a takeover of an abandoned claim, so
    a retry after a crash names the same resource and asks a provider with the same parameters
    (a deadline counted from `claimed_at`) under the same provider idempotency key."""

    resource_id: uuid.UUID
    claimed_at: datetime


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


@on_database_thread
async def claim_idempotency_key(
    conn: Connection,
    *,
    application_id: uuid.UUID,
    scope: str,
    key: str,
    fingerprint: bytes,
    lease_s: float,
    retention_s: float,
    owner: int | None,
    now: datetime,
) -> ClaimResult:
    """Claim `key` for a new request, made by the node `owner`, or say what became of the request
    that claimed it first.

    An expired key is claimed afresh. An in-progress claim is taken over by a request with the same
    fingerprint as soon as its owner is gone (`storage.nodes`: its process died), or, for a claim of
    no known owner or of a node alive but wedged, once its lease ran out.
    """
    claimed = await claim_new_idempotency_keys(
        conn,
        application_id=application_id,
        scope=scope,
        claims=[NewClaim(key, fingerprint)],
        lease_s=lease_s,
        retention_s=retention_s,
        owner=owner,
        now=now,
    )
    if key in claimed:
        return claimed[key]
    terms = ClaimTerms(lease_s, retention_s, owner, now)
    return await claim_seen_idempotency_key(conn, application_id, scope, key, fingerprint, terms)


@on_database_thread
async def claim_seen_idempotency_key(
    conn: Connection, application_id: uuid.UUID, scope: str, key: str, fingerprint: bytes, terms: ClaimTerms
) -> ClaimResult:
    """What became of the request that claimed `key` first, for a key `claim_new_idempotency_keys`
    just left out (seen before, and not expired): its answer to replay, `Mismatch`, `InProgress`,
    or, for an abandoned claim (see `claim_idempotency_key`), the claim taken over on `terms`."""
    lease_s, owner, now = terms.lease_s, terms.owner, terms.now
    existing = await conn.fetchrow(
        f"""SELECT fingerprint, resource_id, created_at, response_status, response_body,
                   locked_until <= $4 OR coalesce(owner_node <> ALL({LIVE_NODES}), false) AS abandoned
            FROM idempotency_keys WHERE application_id = $1 AND scope = $2 AND key = $3 FOR UPDATE""",
        application_id,
        scope,
        key,
        now,
    )
    if bytes(existing["fingerprint"]) != fingerprint:
        return Mismatch()
    if existing["response_status"] is not None:
        return Replay(existing["response_status"], existing["response_body"])
    if existing["abandoned"]:
        await conn.execute(
            """UPDATE idempotency_keys
               SET locked_until = $6::timestamptz + make_interval(secs => $4), owner_node = $5
               WHERE application_id = $1 AND scope = $2 AND key = $3""",
            application_id,
            scope,
            key,
            float(lease_s),
            owner,
            now,
        )
        return Claimed(existing["resource_id"], existing["created_at"])
    return InProgress()


@dataclass(frozen=True)
class NewClaim:
    """A key to claim, with its request's fingerprint and the id to give what it creates, should
    the claim be fresh: drawn here, so the caller knows a fresh claim before it is made."""

    key: str
    fingerprint: bytes
    resource_id: uuid.UUID = field(default_factory=uuid.uuid4)


@on_database_thread
async def claim_new_idempotency_keys(
    conn: Connection,
    *,
    application_id: uuid.UUID,
    scope: str,
    claims: Sequence[NewClaim],
    lease_s: float,
    retention_s: float,
    owner: int | None,
    now: datetime,
) -> dict[str, Claimed]:
    """Claim every key of `claims` (distinct keys) that is new or expired, in one statement, for the
    node `owner`: the claim of each key claimed, with the claim's `resource_id` and `now`. A key
    left out was seen before: `claim_seen_idempotency_key` says what became of its first request.
    The keys are claimed in their sorted order, so two batches in two transactions that hold their
    claims until they commit wait for each other without a deadlock."""
    claims = sorted(claims, key=lambda claim: claim.key)
    rows = await conn.fetch(
        """INSERT INTO idempotency_keys AS k
               (application_id, scope, key, fingerprint, resource_id, locked_until, expires_at, owner_node,
                created_at)
           SELECT $1, $2, claim.key, claim.fingerprint, claim.resource_id,
                  $9::timestamptz + make_interval(secs => $6),
                  $9::timestamptz + make_interval(secs => $7), $8, $9
           FROM unnest($3::text[], $4::bytea[], $5::uuid[]) AS claim(key, fingerprint, resource_id)
           ON CONFLICT (application_id, scope, key) DO UPDATE
               SET fingerprint = EXCLUDED.fingerprint, resource_id = EXCLUDED.resource_id,
                   response_status = NULL, response_body = NULL, locked_until = EXCLUDED.locked_until,
                   created_at = EXCLUDED.created_at, expires_at = EXCLUDED.expires_at,
                   owner_node = EXCLUDED.owner_node
               WHERE k.expires_at <= $9
           RETURNING key, resource_id, created_at""",
        application_id,
        scope,
        [claim.key for claim in claims],
        [claim.fingerprint for claim in claims],
        [claim.resource_id for claim in claims],
        float(lease_s),
        float(retention_s),
        owner,
        now,
    )
    return {row["key"]: Claimed(row["resource_id"], row["created_at"]) for row in rows}


@dataclass(frozen=True)
class ClaimTerms:
    """The terms of the claims one node makes now in one application's scope: how long a claim in
    progress lasts, how long a key is kept, the node, and when."""

    lease_s: float
    retention_s: float
    owner: int | None
    now: datetime


def fresh_claim_cte(
    *, application: int, scope: int, key: int, resource: int, status: int, body: int, first: int
) -> str:
    """A CTE named `claim` that claims a key with its answer already given (the request is done in
    the statement that claims it), if the key is new or expired, and returns the claim's
    `resource_id`; no row when the key was seen before. Each argument is the number of the
    statement's parameter holding that value; the fingerprint and
    `ClaimTerms`' fields (lease, retention, owner, now) follow in that order from `first`
    (`fresh_claim_values`)."""
    fingerprint, lease, retention, owner, now = range(first, first + 5)
    return f"""claim AS (
        INSERT INTO idempotency_keys AS k
            (application_id, scope, key, fingerprint, resource_id, response_status, response_body,
             locked_until, expires_at, owner_node, created_at)
        VALUES (${application}, ${scope}, ${key}, ${fingerprint}, ${resource}, ${status}, ${body},
                ${now}::timestamptz + make_interval(secs => ${lease}),
                ${now}::timestamptz + make_interval(secs => ${retention}), ${owner}, ${now})
        ON CONFLICT (application_id, scope, key) DO UPDATE
            SET fingerprint = EXCLUDED.fingerprint, resource_id = EXCLUDED.resource_id,
                response_status = EXCLUDED.response_status, response_body = EXCLUDED.response_body,
                locked_until = EXCLUDED.locked_until, created_at = EXCLUDED.created_at,
                expires_at = EXCLUDED.expires_at, owner_node = EXCLUDED.owner_node
            WHERE k.expires_at <= ${now}
        RETURNING resource_id
    )"""


def fresh_claim_values(fingerprint: bytes, terms: ClaimTerms) -> tuple[object, ...]:
    """The parameters `fresh_claim_cte` takes from its `first`."""
    return (fingerprint, float(terms.lease_s), float(terms.retention_s), terms.owner, terms.now)


@on_database_thread
async def complete_idempotency_key(
    conn: Connection,
    *,
    application_id: uuid.UUID,
    scope: str,
    key: str,
    status: int,
    body: Mapping[str, object],
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


@on_database_thread
async def release_idempotency_keys(
    conn: Connection, *, application_id: uuid.UUID, scope: str, keys: Sequence[str]
) -> None:
    """Forget the in-progress claims of `keys` whose requests changed nothing, so the callers may
    retry (one statement)."""
    await conn.execute(
        """DELETE FROM idempotency_keys
           WHERE application_id = $1 AND scope = $2 AND key = ANY($3::text[]) AND response_status IS NULL""",
        application_id,
        scope,
        list(keys),
    )


@on_database_thread
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
