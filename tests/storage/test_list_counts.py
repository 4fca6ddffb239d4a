"""The lists that grow with traffic (an application's sessions, a webhook configuration's deliveries)
know how long they are without counting: a counter the database keeps in the same transaction as
the rows. A page past the end reads none of the list's rows, and the first page reads only its own,
however long the list.

What a statement read is taken from PostgreSQL's own per-transaction statistics
(`pg_stat_xact_user_tables`), inside the snapshot the list is read in."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

import pytest

from payorch.config import Settings
from payorch.runtime import open_runtime
from payorch.storage import sessions, webhooks
from payorch.storage.database import Connection, Database
from payorch.values.pagination import PageRequest
from tests.helpers import new_application, new_merchant
from tests.storage.test_webhook_deliveries import _endpoint, _events

# What a statement reads depends on its table's past (the pages of rows deleted before): each test
# counts it on a database never used before.
pytestmark = pytest.mark.fresh_database

SESSIONS = 500
PAST_THE_END = PageRequest(page=99_999_999_999, limit=100)


async def _application(db: Database, settings: Settings) -> uuid.UUID:
    async with open_runtime(settings, db) as runtime:
        client = runtime.app.test_client()
        merchant = await new_merchant(client, db, settings)
        return uuid.UUID((await new_application(client, merchant))["id"])


async def _seed(conn: Connection, application_id: uuid.UUID, count: int) -> None:
    """`count` sessions in one statement, as the bench writes its million."""
    await conn.execute(
        """INSERT INTO checkout_sessions (id, application_id, order_reference, amount_minor, currency,
               status, payment_method, customer, created_at)
           SELECT gen_random_uuid(), $1, 'seed-' || g, 100, 'PLN', 'SUCCEEDED', 'card', '{}'::jsonb,
               $3::timestamptz - g * interval '1 second'
           FROM generate_series(1, $2) AS g""",
        application_id,
        count,
        datetime(2025, 1, 1, tzinfo=UTC),
    )


async def _rows_read(conn: Connection, table: str) -> int:
    """Rows and index entries of `table` this transaction has read so far, by any scan: sequential
    reads of the table, and entries returned by each of its indexes (index-only scans included)."""
    read = await conn.fetchval(
        """SELECT sum(pg_stat_get_xact_tuples_returned(oid)) FROM (
               SELECT $1::regclass::oid AS oid
               UNION ALL SELECT indexrelid FROM pg_index WHERE indrelid = $1::regclass) AS relations""",
        table,
    )
    return int(read or 0)


async def _listed_sessions(
    conn: Connection, application_id: uuid.UUID, page: PageRequest
) -> tuple[int, int, int]:
    """(items, totalItems, sessions read) of one page."""
    found, total = await sessions.list_sessions(conn, application_id, page)
    return len(found), total, await _rows_read(conn, "checkout_sessions")


async def test_a_page_past_the_end_of_the_sessions_reads_no_session(db: Database, settings: Settings) -> None:
    application_id = await _application(db, settings)
    await db.transaction(_seed, application_id, SESSIONS)
    items, total, read = await db.snapshot(_listed_sessions, application_id, PAST_THE_END)
    assert (items, total) == (0, SESSIONS)
    assert read == 0


async def test_the_first_page_of_sessions_reads_only_its_own(db: Database, settings: Settings) -> None:
    application_id = await _application(db, settings)
    await db.transaction(_seed, application_id, SESSIONS)
    items, total, read = await db.snapshot(_listed_sessions, application_id, PageRequest(page=1, limit=20))
    assert (items, total) == (20, SESSIONS)
    assert read <= 20 + 1  # the index scan stops right after the page's last row


async def test_the_session_counter_follows_every_insert_and_delete(db: Database, settings: Settings) -> None:
    application_id = await _application(db, settings)
    other_id = await _application(db, settings)
    await db.transaction(_seed, application_id, 7)
    await db.transaction(_seed, other_id, 3)

    async def delete_two(conn: Connection) -> None:
        await conn.execute(
            """DELETE FROM checkout_sessions WHERE id IN (
                   SELECT id FROM checkout_sessions WHERE application_id = $1 LIMIT 2)""",
            application_id,
        )

    await db.transaction(delete_two)

    async def counted(conn: Connection, of: uuid.UUID) -> tuple[int, int]:
        return await sessions.count_sessions(conn, of), int(
            await conn.fetchval("SELECT count(*) FROM checkout_sessions WHERE application_id = $1", of)
        )

    assert await db.autocommit(counted, application_id) == (5, 5)
    assert await db.autocommit(counted, other_id) == (3, 3)
    assert await db.autocommit(counted, uuid.uuid4()) == (0, 0)


async def test_a_filtered_page_past_the_end_reads_no_more_than_its_count(
    db: Database, settings: Settings
) -> None:
    """The console's filters are counted (no counter holds them), and the page is then skipped."""
    application_id = await _application(db, settings)
    await db.transaction(_seed, application_id, 50)
    where = sessions.SessionFilter(status="SUCCEEDED")

    async def listed(conn: Connection) -> tuple[int, int, int]:
        found, total = await sessions.list_sessions(conn, application_id, PAST_THE_END, where)
        return len(found), total, await _rows_read(conn, "checkout_sessions")

    items, total, read = await db.snapshot(listed)
    assert (items, total) == (0, 50)
    assert read <= 50  # the count's one pass; the page's OFFSET scan would read as many again


async def test_a_page_past_the_end_of_the_deliveries_reads_no_delivery(
    db: Database, settings: Settings
) -> None:
    application_id = await _application(db, settings)
    endpoint = await _endpoint(db, application_id, "counted")
    await _events(db, application_id, 30)

    async def listed(conn: Connection, page: PageRequest) -> tuple[int, int, int]:
        found, total = await webhooks.list_deliveries(conn, endpoint, page)
        return len(found), total, await _rows_read(conn, "webhook_deliveries")

    assert await db.snapshot(listed, PAST_THE_END) == (0, 30, 0)
    items, total, _ = await db.snapshot(listed, PageRequest(page=3, limit=10))
    assert (items, total) == (10, 30)
