"""What one round of the expiry (and refund-submission) supervisor picks: a fair share per merchant,
however many applications it spreads its backlog over, and nothing it is told to leave alone."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

from payorch.storage import due_work, sessions
from payorch.storage.database import Connection, Database

NOW = datetime(2030, 1, 1, tzinfo=UTC)


async def _merchant(conn: Connection, applications: int) -> tuple[uuid.UUID, list[uuid.UUID]]:
    merchant = uuid.uuid4()
    await conn.execute(
        """INSERT INTO merchants (id, legal_business_name, company_registration_number, organization)
           VALUES ($1, 'Shop', $2, '{}')""",
        merchant,
        str(merchant),
    )
    ids = [uuid.uuid4() for _ in range(applications)]
    for application in ids:
        await conn.execute(
            "INSERT INTO applications (id, merchant_id, name) VALUES ($1, $2, 'App')", application, merchant
        )
    return merchant, ids


async def _due_sessions(conn: Connection, application: uuid.UUID, count: int, *, since: datetime) -> None:
    for index in range(count):
        await conn.execute(
            """INSERT INTO checkout_sessions (id, application_id, order_reference, amount_minor, currency,
                                             status, payment_method, customer, expires_at)
               VALUES ($1, $2, 'order', 100, 'PLN', 'PENDING', 'card', '{}', $3)""",
            uuid.uuid4(),
            application,
            since + timedelta(seconds=index),
        )


async def test_a_round_takes_a_share_per_merchant_whatever_its_applications_and_backlog(db: Database) -> None:
    async def setup(conn: Connection) -> tuple[uuid.UUID, list[uuid.UUID], uuid.UUID, uuid.UUID]:
        big, big_apps = await _merchant(conn, applications=3)
        small, (small_app,) = await _merchant(conn, applications=1)
        for application in big_apps:  # the big merchant's backlog is older than anything else
            await _due_sessions(conn, application, 50, since=NOW - timedelta(hours=1))
        await _due_sessions(conn, small_app, 1, since=NOW - timedelta(minutes=1))
        return big, big_apps, small, small_app

    big, big_apps, small, small_app = await db.transaction(setup)

    picked = await db.autocommit(sessions.sessions_due_for_expiry, 10, per_merchant=2, now=NOW)
    # Two of the big merchant's 150 (its share), the small one's one; every merchant's first item
    # before any merchant's second, the oldest first.
    assert [item.merchant_id for item in picked] == [big, small, big]

    # What a merchant has in flight counts against its share; what is left alone is skipped.
    in_flight = due_work.Skips(in_flight={big: 1}, items=[picked[0].id], applications=[small_app])
    again = await db.autocommit(
        sessions.sessions_due_for_expiry, 10, per_merchant=2, skips=in_flight, now=NOW
    )
    assert len(again) == 1
    assert again[0].merchant_id == big and again[0].id != picked[0].id
    assert again[0].application_id in big_apps

    # The free slots bound the round.
    assert len(await db.autocommit(sessions.sessions_due_for_expiry, 1, per_merchant=2, now=NOW)) == 1
    assert await db.autocommit(sessions.sessions_due_for_expiry, 0, per_merchant=2, now=NOW) == []


async def test_the_expiry_loops_look_reads_the_due_sessions_and_the_earliest_expiry_together(
    db: Database,
) -> None:
    look = sessions.sessions_due_for_expiry_and_next
    assert await db.autocommit(look, 10, per_merchant=2, now=NOW) == ([], None)  # none pending

    async def setup(conn: Connection) -> None:
        _, (application,) = await _merchant(conn, applications=1)
        await _due_sessions(conn, application, 1, since=NOW - timedelta(minutes=1))
        await _due_sessions(conn, application, 1, since=NOW + timedelta(hours=1))

    await db.transaction(setup)
    due, next_in_s = await db.autocommit(look, 10, per_merchant=2, now=NOW)
    assert (len(due), next_in_s) == (1, -60.0)
    assert await db.autocommit(look, 10, per_merchant=2, now=NOW - timedelta(minutes=2)) == ([], 60.0)
