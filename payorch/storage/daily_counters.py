"""The figures per UTC day that the console draws (docs/console.md, "Figures per day"): for each
application, provider and currency, the sessions created, approved (and their amount), the
declines and the completed refunds (and their amount). Migration 0036 makes the table.

The counters are added to by the very transactions that write those outcomes, so they are exact:
an outcome counts if and only if its transaction commits, and it is counted where its state
changes once (a session's move to paid, a refund's verdict), so an event delivered twice counts
once. Each (application, day, provider, currency) is spread over `SHARDS` rows, summed when read,
and a transaction adds to one of them only: a create batch to the shard of its first session, an
outcome to its session's (or refund's) shard. So concurrent transactions of one application, on
one or several processes, rarely queue on one counter row's lock, as they would on a single row
per day. A create batch adds to each of its rows once, in the order of their keys
(`in_counter_order`), so two batches never wait on each other in a cycle.

A read sums one primary-key range per application over the days asked for: its cost follows the
days, providers and currencies shown, never the sessions.
"""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime
from typing import TypeVar

from payorch.storage.database import Connection
from payorch.storage.database_thread import on_database_thread

SHARDS = 8
T = TypeVar("T")
KEY_COLUMNS = "application_id, day, provider_name, currency, shard"


def shard_of(some_id: uuid.UUID) -> int:
    """The counter shard the outcomes of the session or refund `some_id` add to."""
    return some_id.int % SHARDS


def utc_day(moment: datetime) -> date:
    """The UTC day a moment is counted on."""
    return moment.astimezone(UTC).date()


def created_counter(
    application: int, created_at: int, provider: int, currency: int, shard: int, added: int
) -> str:
    """A CTE named `counted`, adding `added` to the created sessions of its counter row, and
    writing nothing when that is 0; each argument is the number of the statement's parameter
    holding that value."""
    return f"""counted AS (
        INSERT INTO daily_counters AS c ({KEY_COLUMNS}, sessions_created)
        SELECT ${application}::uuid, (${created_at}::timestamptz AT TIME ZONE 'UTC')::date,
               ${provider}::text, ${currency}::char(3), ${shard}::smallint, ${added}::bigint
        WHERE ${added}::bigint > 0
        ON CONFLICT ({KEY_COLUMNS}) DO UPDATE
            SET sessions_created = c.sessions_created + excluded.sessions_created
    )"""


def in_counter_order(items: Sequence[T], key: Callable[[T], tuple[date, str, str]]) -> list[tuple[T, int]]:
    """A create batch in the order of the counter rows it adds to (`key` of each item), each item
    with the number of created sessions its statement adds: on the first item of a row the batch's
    count for that row, 0 on the others. So each counter row is updated once per batch, and every
    batch locks its rows in one order."""
    ordered = sorted(items, key=key)
    sizes = Counter(key(item) for item in ordered)
    added: list[tuple[T, int]] = []
    for index, item in enumerate(ordered):
        first_of_row = index == 0 or key(ordered[index - 1]) != key(item)
        added.append((item, sizes[key(item)] if first_of_row else 0))
    return added


_ADD_OUTCOME = f"""
    INSERT INTO daily_counters AS c ({KEY_COLUMNS}, sessions_approved, approved_minor, declines)
    VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
    ON CONFLICT ({KEY_COLUMNS}) DO UPDATE
        SET sessions_approved = c.sessions_approved + excluded.sessions_approved,
            approved_minor = c.approved_minor + excluded.approved_minor,
            declines = c.declines + excluded.declines"""


@on_database_thread
async def count_approved(
    conn: Connection,
    *,
    application_id: uuid.UUID,
    session_id: uuid.UUID,
    provider: str,
    currency: str,
    amount_minor: int,
    now: datetime,
) -> None:
    """Count the session paid at `provider` on `now`'s day. Call it in the transaction that moves
    the session to paid, once: only that move counts."""
    await conn.execute(
        _ADD_OUTCOME,
        application_id,
        utc_day(now),
        provider,
        currency,
        shard_of(session_id),
        1,
        amount_minor,
        0,
    )


@on_database_thread
async def count_declined(
    conn: Connection,
    *,
    application_id: uuid.UUID,
    session_id: uuid.UUID,
    provider: str,
    currency: str,
    now: datetime,
) -> None:
    """Count one decline at `provider` on `now`'s day, in the transaction that applies it."""
    await conn.execute(
        _ADD_OUTCOME, application_id, utc_day(now), provider, currency, shard_of(session_id), 0, 0, 1
    )


# A duplicate payment's refund (its attempt names it) returns a payment never counted as approved:
# it is left out here too.
_ADD_REFUND = f"""
    INSERT INTO daily_counters AS c ({KEY_COLUMNS}, refunds, refunded_minor)
    SELECT $1, $2, $3, $4, $5, 1, $6
    WHERE NOT EXISTS (SELECT 1 FROM payment_attempts WHERE refund_id = $7)
    ON CONFLICT ({KEY_COLUMNS}) DO UPDATE
        SET refunds = c.refunds + 1, refunded_minor = c.refunded_minor + excluded.refunded_minor"""


@on_database_thread
async def count_completed_refund(
    conn: Connection,
    *,
    application_id: uuid.UUID,
    refund_id: uuid.UUID,
    provider: str,
    currency: str,
    amount_minor: int,
    now: datetime,
) -> None:
    """Count the refund completed on `now`'s day, in the transaction that gives it that verdict
    (once: a refund has one verdict). A duplicate payment's refund is not counted."""
    await conn.execute(
        _ADD_REFUND,
        application_id,
        utc_day(now),
        provider,
        currency,
        shard_of(refund_id),
        amount_minor,
        refund_id,
    )


@dataclass(frozen=True)
class DayCounts:
    """The counters of one UTC day, provider and currency, summed over the applications read."""

    day: date
    provider: str
    currency: str
    created: int
    approved: int
    approved_minor: int
    declines: int
    refunds: int
    refunded_minor: int


_READ = """
    SELECT c.day, c.provider_name, c.currency, sum(c.sessions_created) AS created,
           sum(c.sessions_approved) AS approved, sum(c.approved_minor) AS approved_minor,
           sum(c.declines) AS declines, sum(c.refunds) AS refunds, sum(c.refunded_minor) AS refunded_minor
    FROM applications a
    JOIN daily_counters c ON c.application_id = a.id AND c.day >= $3 AND c.day <= $4
    WHERE a.merchant_id = $1 AND ($2::uuid IS NULL OR a.id = $2)
    GROUP BY 1, 2, 3
    ORDER BY 1, 2, 3"""


@on_database_thread
async def daily_counts(
    conn: Connection, merchant_id: uuid.UUID, application_id: uuid.UUID | None, *, first: date, last: date
) -> list[DayCounts]:
    """The counters of the days from `first` to `last` (both included) of `merchant_id`'s
    application `application_id`, or of all its applications when None (another merchant's
    application reads as nothing), per day, provider and currency; only those with a row."""
    rows = await conn.fetch(_READ, merchant_id, application_id, first, last)
    return [
        DayCounts(
            day=row["day"],
            provider=row["provider_name"],
            currency=row["currency"].strip(),
            created=int(row["created"]),
            approved=int(row["approved"]),
            approved_minor=int(row["approved_minor"]),
            declines=int(row["declines"]),
            refunds=int(row["refunds"]),
            refunded_minor=int(row["refunded_minor"]),
        )
        for row in rows
    ]
