"""Due background work picked fairly: what the expiry and refund-submission supervisors take in one
round, a share per merchant, so one merchant's backlog cannot fill a round.

A round takes at most `limit` items (the supervisor's free slots), at most `per_merchant` items per
merchant minus what that merchant has in flight already, every merchant's first item before any
merchant's second one, and the oldest first within a merchant. Items and applications the supervisor
is leaving alone for now (in flight, or backing off after a failure) are skipped.

Each application gives at most `per_merchant` candidates, read from an index on (application_id,
<when due>) by a LATERAL probe per application, so the cost of a round follows the number of
applications, not the depth of one merchant's backlog: 10,000 due sessions of one merchant cost
what a few do.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

from payorch.storage.database import Connection
from payorch.storage.database_thread import on_database_thread


@dataclass(frozen=True)
class DueItem:
    """One item of due work: a session to expire, a refund to submit."""

    id: uuid.UUID
    application_id: uuid.UUID
    merchant_id: uuid.UUID


@dataclass(frozen=True)
class Skips:
    """What a round must not pick, and what each merchant has in flight already."""

    in_flight: Mapping[uuid.UUID, int]  # merchant id -> items in flight in this process
    items: Sequence[uuid.UUID] = ()  # in flight, or backing off
    applications: Sequence[uuid.UUID] = ()  # backing off (their actor's mailbox was full)


NO_SKIPS = Skips(in_flight={})


def fair_share(table: str, due: str, order: str, *, lock: bool = False) -> str:
    """The statement picking due rows of `table` (condition `due`, oldest by `order`), a fair share
    per merchant, as described above; with `lock`, the rows are locked FOR UPDATE SKIP LOCKED, so
    two processes never pick the same one. Its parameters: $1 limit, $2 per merchant, $3/$4 merchant
    ids and their in-flight counts, $5 skipped item ids, $6 skipped application ids, $7 now. It
    yields `id, application_id, merchant_id`."""
    locking = "FOR UPDATE SKIP LOCKED" if lock else ""
    return f"""
        WITH candidates AS (
            SELECT t.id, t.application_id, a.merchant_id, t.due_at,
                   row_number() OVER (PARTITION BY a.merchant_id ORDER BY t.due_at, t.id) AS place
            FROM applications a
            CROSS JOIN LATERAL (
                SELECT id, application_id, {order} AS due_at FROM {table}
                WHERE application_id = a.id AND {due} AND id <> ALL($5::uuid[])
                ORDER BY {order} LIMIT $2 {locking}) t
            WHERE a.id <> ALL($6::uuid[])),
        in_flight AS (
            SELECT * FROM unnest($3::uuid[], $4::int[]) AS f(merchant_id, items))
        SELECT c.id, c.application_id, c.merchant_id
        FROM candidates c LEFT JOIN in_flight f USING (merchant_id)
        WHERE c.place <= $2 - coalesce(f.items, 0)
        ORDER BY c.place, c.due_at, c.id LIMIT $1"""


@on_database_thread
async def pick(
    conn: Connection,
    statement: str,
    *extra: object,
    limit: int,
    per_merchant: int,
    skips: Skips,
    now: datetime,
) -> list[DueItem]:
    """Run a `fair_share` statement, or one built around it with the same parameters and `extra`
    ones after them ($8 on)."""
    if limit <= 0:
        return []
    merchants = list(skips.in_flight)
    rows = await conn.fetch(
        statement,
        limit,
        per_merchant,
        merchants,
        [skips.in_flight[merchant] for merchant in merchants],
        list(skips.items),
        list(skips.applications),
        now,
        *extra,
    )
    return [DueItem(row["id"], row["application_id"], row["merchant_id"]) for row in rows]
