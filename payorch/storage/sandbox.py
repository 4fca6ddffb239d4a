"""The sandbox provider's own tables: webhook endpoints, checkouts, refunds, events and their deliveries.

These are the provider's side of the world, as an external provider would keep them; payorch's own
tables are never touched from here. Times come from the caller (`now`): the sandbox keeps payorch's
clock, as a provider's clock agrees with its merchants'.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

import asyncpg

from payorch.storage.daily_counters import in_counter_order
from payorch.storage.database import Connection
from payorch.storage.database_thread import on_database_thread
from payorch.storage.idempotency_keys import ClaimTerms, fresh_claim_values
from payorch.storage.sessions import (
    AnsweredSession,
    answered_statement,
    answered_values,
    batch_shard,
    claimed_statement,
    counter_key,
)
from payorch.storage.wakeup import mark_sandbox_event_queued


@dataclass(frozen=True)
class SandboxCheckout:
    id: str
    account: str
    amount_minor: int
    currency: str
    payment_method: str
    order_reference: str
    customer_email: str
    client_reference: str
    application_id: uuid.UUID
    success_url: str | None
    failure_url: str | None
    expires_at: datetime
    status: str
    paid_at: datetime | None
    refund_failure_code: str | None
    created_at: datetime

    def expired(self, now: datetime) -> bool:
        """Whether `expires_at` has passed at `now`."""
        return self.expires_at <= now


@dataclass(frozen=True)
class NewCheckout:
    id: str
    account: str
    idempotency_key: str
    amount_minor: int
    currency: str
    payment_method: str
    order_reference: str
    customer_email: str
    client_reference: str
    application_id: uuid.UUID
    success_url: str | None
    failure_url: str | None
    expires_at: datetime


@dataclass(frozen=True)
class SandboxRefund:
    id: str
    account: str
    checkout_id: str
    amount_minor: int
    currency: str
    client_reference: str
    reason: str | None
    outcome: str
    failure_code: str | None
    completes_at: datetime
    created_at: datetime


@dataclass(frozen=True)
class NewRefund:
    id: str
    account: str
    idempotency_key: str
    checkout_id: str
    amount_minor: int
    currency: str
    client_reference: str
    reason: str | None
    outcome: str
    failure_code: str | None
    delay_ms: int


@dataclass(frozen=True)
class SandboxEvent:
    id: str
    account: str
    type: str
    checkout_id: str
    refund_id: str | None
    body: str
    created_at: datetime
    deliver_at: datetime


@dataclass(frozen=True)
class ClaimedDelivery:
    """A delivery this sender owns until its lease ends: what to POST, where, signed with what."""

    event_id: str
    endpoint_id: str
    attempts: int  # including this one
    url: str
    sealed_secret: bytes
    body: str


# A new checkout's columns, and the values `_new_checkout_values` gives them, as $1, $2, ...
_NEW_CHECKOUT_COLUMNS = [*NewCheckout.__dataclass_fields__, "created_at"]
_INSERT_NEW_CHECKOUT = f"""INSERT INTO sandbox_checkouts ({", ".join(_NEW_CHECKOUT_COLUMNS)})
        VALUES ({", ".join(f"${index}" for index in range(1, len(_NEW_CHECKOUT_COLUMNS) + 1))})"""
# A new checkout, its session and its session's Idempotency-Key answer, in one statement: with no
# ON CONFLICT, a checkout key used before fails it, and the whole batch with it.
_INSERT_WITH_SESSION = f"""WITH checkout AS ({_INSERT_NEW_CHECKOUT}),
    {answered_statement(len(_NEW_CHECKOUT_COLUMNS) + 1)}"""
# The same, the session's Idempotency-Key claimed by the statement too (`claimed_statement`).
_INSERT_WITH_CLAIMED_SESSION = f"""WITH checkout AS ({_INSERT_NEW_CHECKOUT}),
    {claimed_statement(len(_NEW_CHECKOUT_COLUMNS) + 1)}"""
_ACCOUNT = _NEW_CHECKOUT_COLUMNS.index("account") + 1
_IDEMPOTENCY_KEY = _NEW_CHECKOUT_COLUMNS.index("idempotency_key") + 1
_CHECKOUT_COLUMNS = """id, account, amount_minor, currency, payment_method, order_reference, customer_email,
    client_reference, application_id, success_url, failure_url, expires_at, status, paid_at,
    refund_failure_code, created_at"""
_REFUND_COLUMNS = ", ".join(SandboxRefund.__dataclass_fields__)
_EVENT_COLUMNS = ", ".join(SandboxEvent.__dataclass_fields__)


def _checkout(row: asyncpg.Record) -> SandboxCheckout:
    return SandboxCheckout(**dict(row.items()))


def _refund(row: asyncpg.Record) -> SandboxRefund:
    return SandboxRefund(**dict(row.items()))


# Webhook endpoints


@on_database_thread
async def save_webhook_endpoint(
    conn: Connection, *, endpoint_id: str, account: str, url: str, sealed_secret: bytes, now: datetime
) -> str:
    """Register `url` for `account` with this secret; the id of the endpoint (an existing endpoint
    for the same URL keeps its id and takes the new secret)."""
    found: str = await conn.fetchval(
        """INSERT INTO sandbox_webhook_endpoints (id, account, url, secret, created_at, updated_at)
           VALUES ($1, $2, $3, $4, $5, $5)
           ON CONFLICT (account, url) DO UPDATE SET secret = EXCLUDED.secret, updated_at = $5
           RETURNING id""",
        endpoint_id,
        account,
        url,
        sealed_secret,
        now,
    )
    return found


# Checkouts


@on_database_thread
async def insert_checkouts_with_sessions(
    conn: Connection, stored: Sequence[tuple[NewCheckout, AnsweredSession]], *, now: datetime
) -> None:
    """Store each new checkout with the session routed to it and that session's Idempotency-Key
    answer: one statement each, the lot in one round trip, all or none (asyncpg runs the batch as
    one implicit transaction; PostgreSQL runs every statement of a WITH whether read or not).
    `asyncpg.UniqueViolationError` when a checkout's key was used before (a retry of a session whose
    first attempt made its checkout and died before storing it): then nothing is stored, and
    `insert_checkout` finds the checkout made before."""
    shard = batch_shard([answered for _, answered in stored])
    ordered = in_counter_order(stored, lambda pair: counter_key(pair[1]))
    await conn.executemany(
        _INSERT_WITH_SESSION,
        [
            (*_new_checkout_values(new, now), *answered_values(answered, shard, added))
            for (new, answered), added in ordered
        ],
    )


@on_database_thread
async def insert_checkouts_with_claimed_sessions(
    conn: Connection, stored: Sequence[tuple[NewCheckout, AnsweredSession, bytes]], terms: ClaimTerms
) -> None:
    """As `insert_checkouts_with_sessions`, each session's Idempotency-Key (its request's
    fingerprint the third of each triple) claimed by its statement on `terms` too: the whole
    batch, claims and all, in one round trip and one transaction. Fails, storing nothing, when a
    key was seen before (`sessions.claim_was_not_fresh`). The keys of one counter row are claimed
    in their sorted order, as `claim_new_idempotency_keys` claims them."""
    await insert_checkouts_with_claimed_sessions_together(conn, [(stored, terms)])


@on_database_thread
async def insert_checkouts_with_claimed_sessions_together(
    conn: Connection,
    batches: Sequence[tuple[Sequence[tuple[NewCheckout, AnsweredSession, bytes]], ClaimTerms]],
) -> None:
    """`insert_checkouts_with_claimed_sessions` for the batches of several applications at once
    (`storage.together`), each on its own claim terms: one round trip and one transaction for them
    all, all or none. The applications' rows go in the order of their ids, so that any two such
    statements lock their counter rows and claim their keys in one order."""
    rows: list[tuple[object, ...]] = []
    for stored, terms in sorted(batches, key=lambda batch: batch[0][0][1].session.draft.application_id):
        shard = batch_shard([answered for _, answered, _ in stored])
        by_key = sorted(stored, key=lambda triple: triple[1].key)
        ordered = in_counter_order(by_key, lambda triple: counter_key(triple[1]))
        rows.extend(
            (
                *_new_checkout_values(new, terms.now),
                *answered_values(answered, shard, added),
                *fresh_claim_values(fingerprint, terms),
            )
            for (new, answered, fingerprint), added in ordered
        )
    await conn.executemany(_INSERT_WITH_CLAIMED_SESSION, rows)


def _new_checkout_values(new: NewCheckout, now: datetime) -> tuple[object, ...]:
    return (*(getattr(new, name) for name in NewCheckout.__dataclass_fields__), now)


@on_database_thread
async def insert_checkout(
    conn: Connection, new: NewCheckout, *, now: datetime
) -> tuple[SandboxCheckout, bool]:
    """Store `new`, unless the account already used its idempotency key: then the checkout made with
    that key. The flag says whether this call created it."""
    row = await conn.fetchrow(
        f"""WITH created AS (
                {_INSERT_NEW_CHECKOUT}
                ON CONFLICT (account, idempotency_key) DO NOTHING
                RETURNING {_CHECKOUT_COLUMNS})
            SELECT {_CHECKOUT_COLUMNS}, TRUE AS created FROM created
            UNION ALL
            SELECT {_CHECKOUT_COLUMNS}, FALSE FROM sandbox_checkouts
            WHERE account = ${_ACCOUNT} AND idempotency_key = ${_IDEMPOTENCY_KEY}
              AND NOT EXISTS (SELECT FROM created)""",
        *_new_checkout_values(new, now),
    )
    if row is not None:
        values = dict(row.items())
        created = bool(values.pop("created"))
        return SandboxCheckout(**values), created
    # The conflicting insert committed after this statement began (ON CONFLICT waited for it, the
    # SELECT could not see it): a new statement does.
    row = await conn.fetchrow(
        f"SELECT {_CHECKOUT_COLUMNS} FROM sandbox_checkouts WHERE account = $1 AND idempotency_key = $2",
        new.account,
        new.idempotency_key,
    )
    return _checkout(row), False


@on_database_thread
async def get_checkout(conn: Connection, checkout_id: str) -> SandboxCheckout | None:
    row = await conn.fetchrow(f"SELECT {_CHECKOUT_COLUMNS} FROM sandbox_checkouts WHERE id = $1", checkout_id)
    return _checkout(row) if row else None


@on_database_thread
async def lock_checkout(conn: Connection, checkout_id: str) -> SandboxCheckout | None:
    """The checkout, locked until the transaction ends: payments and refunds of it go one at a time."""
    row = await conn.fetchrow(
        f"SELECT {_CHECKOUT_COLUMNS} FROM sandbox_checkouts WHERE id = $1 FOR UPDATE", checkout_id
    )
    return _checkout(row) if row else None


@on_database_thread
async def close_checkout(
    conn: Connection, account: str, checkout_id: str, *, now: datetime
) -> SandboxCheckout | None:
    """Expire the account's checkout at `now` unless it is paid, after any payment of it under way."""
    row = await conn.fetchrow(
        f"""UPDATE sandbox_checkouts
               SET expires_at = CASE WHEN status = 'paid' THEN expires_at ELSE least(expires_at, $3) END
             WHERE id = $1 AND account = $2 RETURNING {_CHECKOUT_COLUMNS}""",
        checkout_id,
        account,
        now,
    )
    return _checkout(row) if row else None


@on_database_thread
async def last_failure_code(conn: Connection, checkout_id: str) -> str | None:
    """The failure code of the checkout's latest declined payment; None when none was declined."""
    body = await conn.fetchval(
        """SELECT body FROM sandbox_events WHERE checkout_id = $1 AND type = 'checkout.payment_failed'
           ORDER BY created_at DESC LIMIT 1""",
        checkout_id,
    )
    if body is None:
        return None
    code = json.loads(body)["data"].get("failure_code")
    return code if isinstance(code, str) else None


@on_database_thread
async def mark_checkout_paid(
    conn: Connection, checkout_id: str, *, refund_failure_code: str | None, now: datetime
) -> SandboxCheckout:
    row = await conn.fetchrow(
        f"""UPDATE sandbox_checkouts SET status = 'paid', paid_at = $3, refund_failure_code = $2
            WHERE id = $1 RETURNING {_CHECKOUT_COLUMNS}""",
        checkout_id,
        refund_failure_code,
        now,
    )
    return _checkout(row)


# Refunds


@on_database_thread
async def find_refund(conn: Connection, account: str, idempotency_key: str) -> SandboxRefund | None:
    row = await conn.fetchrow(
        f"SELECT {_REFUND_COLUMNS} FROM sandbox_refunds WHERE account = $1 AND idempotency_key = $2",
        account,
        idempotency_key,
    )
    return _refund(row) if row else None


@on_database_thread
async def refunded_minor(conn: Connection, checkout_id: str) -> int:
    """The sum of the checkout's refunds that do not fail."""
    total = await conn.fetchval(
        """SELECT coalesce(sum(amount_minor), 0) FROM sandbox_refunds
           WHERE checkout_id = $1 AND outcome <> 'failed'""",
        checkout_id,
    )
    return int(total)


@on_database_thread
async def insert_refund(conn: Connection, new: NewRefund, *, now: datetime) -> tuple[SandboxRefund, bool]:
    """Store `new`, completing `delay_ms` from now, unless the account already used its idempotency
    key: then the refund made with that key. The flag says whether this call created it."""
    row = await conn.fetchrow(
        f"""INSERT INTO sandbox_refunds (id, account, idempotency_key, checkout_id, amount_minor, currency,
                client_reference, reason, outcome, failure_code, completes_at, created_at)
            VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10,
                    $12::timestamptz + $11::int * interval '1 millisecond', $12)
            ON CONFLICT (account, idempotency_key) DO NOTHING
            RETURNING {_REFUND_COLUMNS}""",
        new.id,
        new.account,
        new.idempotency_key,
        new.checkout_id,
        new.amount_minor,
        new.currency,
        new.client_reference,
        new.reason,
        new.outcome,
        new.failure_code,
        new.delay_ms,
        now,
    )
    if row is not None:
        return _refund(row), True
    existing = await find_refund(conn, new.account, new.idempotency_key)
    assert existing is not None  # the conflicting row has committed
    return existing, False


# Events and their deliveries


@on_database_thread
async def queue_event(
    conn: Connection,
    *,
    event_id: str,
    account: str,
    event_type: str,
    checkout_id: str,
    refund_id: str | None,
    body: str,
    delay_ms: int,
    now: datetime,
) -> SandboxEvent:
    """Store the event, due `delay_ms` after `now`, with one delivery to each endpoint the account
    has registered; the sender of this process is woken once the caller's transaction commits."""
    mark_sandbox_event_queued()
    row = await conn.fetchrow(
        f"""INSERT INTO sandbox_events (id, account, type, checkout_id, refund_id, body, deliver_at,
                                        created_at)
            VALUES ($1, $2, $3, $4, $5, $6, $8::timestamptz + $7::int * interval '1 millisecond', $8)
            RETURNING {_EVENT_COLUMNS}""",
        event_id,
        account,
        event_type,
        checkout_id,
        refund_id,
        body,
        delay_ms,
        now,
    )
    await conn.execute(
        """INSERT INTO sandbox_deliveries (event_id, endpoint_id, deliver_at)
           SELECT $1, id, $3 FROM sandbox_webhook_endpoints WHERE account = $2""",
        event_id,
        account,
        row["deliver_at"],
    )
    return SandboxEvent(**dict(row.items()))


@on_database_thread
async def claim_due_deliveries(
    conn: Connection, *, limit: int, lease_s: float, owner: int | None, now: datetime
) -> list[ClaimedDelivery]:
    """Up to `limit` due deliveries, each counted as an attempt, leased for `lease_s` and named by
    the node `owner`: another sender skips them until then, and takes them over as soon as it sees
    this node gone (`storage.claim_takeover`) if it dies before reporting back."""
    rows = await conn.fetch(
        """WITH due AS (
               SELECT event_id, endpoint_id FROM sandbox_deliveries
               WHERE delivered_at IS NULL AND given_up_at IS NULL AND deliver_at <= $4
               ORDER BY deliver_at, event_id
               LIMIT $1
               FOR UPDATE SKIP LOCKED)
           UPDATE sandbox_deliveries d
           SET deliver_at = $4::timestamptz + make_interval(secs => $2), attempts = d.attempts + 1,
               claimed_by = $3
           FROM due, sandbox_events e, sandbox_webhook_endpoints w
           WHERE d.event_id = due.event_id AND d.endpoint_id = due.endpoint_id
             AND e.id = d.event_id AND w.id = d.endpoint_id
           RETURNING d.event_id, d.endpoint_id, d.attempts, w.url, w.secret AS sealed_secret, e.body""",
        limit,
        lease_s,
        owner,
        now,
    )
    return [ClaimedDelivery(**dict(row.items())) for row in rows]


@on_database_thread
async def claim_due_deliveries_or_wait(
    conn: Connection, *, limit: int, lease_s: float, owner: int | None, now: datetime
) -> tuple[list[ClaimedDelivery], float | None]:
    """`claim_due_deliveries`; when it claims none, also how long until the next delivery falls due
    (`seconds_until_next_delivery`), for the sender to wait that long: one unit either way."""
    claimed = await claim_due_deliveries(conn, limit=limit, lease_s=lease_s, owner=owner, now=now)
    return claimed, None if claimed else await seconds_until_next_delivery(conn, now=now)


@on_database_thread
async def seconds_until_next_delivery(conn: Connection, *, now: datetime) -> float | None:
    """How long until the next delivery falls due (a retry, an event queued with a delay, a claim's
    lease running out), 0 when one is due already; None when none is pending."""
    wait: float | None = await conn.fetchval(
        """SELECT extract(epoch FROM min(deliver_at) - $1)::float8 FROM sandbox_deliveries
           WHERE delivered_at IS NULL AND given_up_at IS NULL""",
        now,
    )
    return None if wait is None else max(wait, 0.0)


@on_database_thread
async def mark_delivered(conn: Connection, event_id: str, endpoint_id: str, *, now: datetime) -> None:
    await conn.execute(
        """UPDATE sandbox_deliveries SET delivered_at = $3, last_error = NULL, claimed_by = NULL
           WHERE event_id = $1 AND endpoint_id = $2 AND delivered_at IS NULL""",
        event_id,
        endpoint_id,
        now,
    )


@on_database_thread
async def mark_failed_attempt(
    conn: Connection, event_id: str, endpoint_id: str, *, error: str, retry_in_s: float | None, now: datetime
) -> None:
    """Record a failed attempt: due again `retry_in_s` after `now`, or given up when that is None."""
    await conn.execute(
        """UPDATE sandbox_deliveries
           SET last_error = $3, claimed_by = NULL,
               deliver_at = CASE WHEN $4::float8 IS NULL THEN deliver_at
                                 ELSE $5::timestamptz + make_interval(secs => $4::float8) END,
               given_up_at = CASE WHEN $4::float8 IS NULL THEN $5 END
           WHERE event_id = $1 AND endpoint_id = $2 AND delivered_at IS NULL""",
        event_id,
        endpoint_id,
        error,
        retry_in_s,
        now,
    )
